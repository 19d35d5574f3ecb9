package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d < time.Microsecond {
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
	return fmt.Sprintf("%.2fms", float64(d)/1e6)
}

// fmtCount is v rounded, with thousands separated: 124,701.
func fmtCount(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if v <= -0.5 {
		s = "-" + s
	}
	return s
}

// fmtRatio is n as a multiple of the limit: 2.00x.
func fmtRatio(n int) string { return fmt.Sprintf("%.2fx", float64(n)/limit) }

// colours gives every algorithm (and the reference and the peer) one
// colour, the same in every chart of the report and on the server's demo
// page (cmd/limitkit/web/common.js, which TestDemoColours holds to this
// table). Grey is what was offered, and nothing else.
var colours = map[string]string{
	"tokenbucket":             "#1f77b4",
	"tokenbucket-interval":    "#17becf",
	"fixedwindow":             "#d62728",
	"slidingwindow-segmented": "#ff7f0e",
	"slidingwindow-weighted":  "#8c564b",
	"slidinglog":              "#2ca02c",
	"concurrency":             "#9467bd",
	"quota":                   "#393b79",
	xrateName:                 "#e377c2",
	peerName:                  "#bcbd22",
}

// offeredColour fills what was offered, behind what was admitted.
const offeredColour = "#c7c7c7"

func colour(name string) string {
	if c, ok := colours[name]; ok {
		return c
	}
	return "#444444"
}

// algorithmNamed is the algorithm of that name, if it is one.
func algorithmNamed(name string) (algorithm, bool) {
	for _, a := range algorithms() {
		if a.name == name {
			return a, true
		}
	}
	return algorithm{}, false
}

// configOf is the configuration the scenarios ran for name, as Go source
// writes it.
func configOf(name string) string {
	if a, ok := algorithmNamed(name); ok {
		return describe(a.cfg)
	}
	return ""
}

// --- lookups --------------------------------------------------------------

// costAt is the cost of algorithm on backend at g goroutines over keys keys
// (0 in memory, 1 for one Redis key), if measured.
func (r *results) costAt(algorithm, backend string, g, keys int) (cost, bool) {
	for _, c := range r.costs {
		if c.algorithm == algorithm && c.backend == backend && c.goroutines == g && c.keys == keys {
			return c, true
		}
	}
	return cost{}, false
}

// costNames is the names with cost rows on backend, in the order measured.
func (r *results) costNames(backend string) []string {
	var names []string
	for _, c := range r.costs {
		if c.backend == backend && !slices.Contains(names, c.algorithm) {
			names = append(names, c.algorithm)
		}
	}
	return names
}

func (r *results) footprintOf(algorithm, backend string) (footprint, bool) {
	for _, m := range r.memory {
		if m.algorithm == algorithm && m.backend == backend {
			return m, true
		}
	}
	return footprint{}, false
}

// run is the accuracy run of algorithm on traffic in memory, if made.
func (r *results) run(traffic, algorithm string) (accuracy, bool) {
	for _, a := range r.accuracy {
		if a.backend == "memory" && a.traffic == traffic && a.algorithm == algorithm {
			return a, true
		}
	}
	return accuracy{}, false
}

// rateNames is the algorithms with accuracy runs in memory, in the order run.
func (r *results) rateNames() []string {
	var names []string
	for _, a := range r.accuracy {
		if a.backend == "memory" && !slices.Contains(names, a.algorithm) {
			names = append(names, a.algorithm)
		}
	}
	return names
}

// runs is algorithm's accuracy runs in memory, one per traffic, and
// whether every traffic has one.
func (r *results) runs(algorithm string) ([]accuracy, bool) {
	var out []accuracy
	for _, tr := range r.traffics {
		if a, ok := r.run(tr.name, algorithm); ok {
			out = append(out, a)
		}
	}
	return out, len(out) == len(r.traffics) && len(out) > 0
}

// sameAsMemory is how many of a's decisions equal those of the same
// algorithm on the same traffic in memory, and of how many; ok is false
// for memory itself or when memory's run is missing.
func (r *results) sameAsMemory(a accuracy) (same, of int, ok bool) {
	if a.backend == "memory" {
		return 0, 0, false
	}
	m, found := r.run(a.traffic, a.algorithm)
	if !found || len(m.granted) != len(a.granted) {
		return 0, 0, false
	}
	for i := range m.granted {
		if m.granted[i] == a.granted[i] {
			same++
		}
	}
	return same, len(a.granted), true
}

// agreement sums sameAsMemory over every run off memory.
func (r *results) agreement() (differ, of, runs int) {
	for _, a := range r.accuracy {
		if same, n, ok := r.sameAsMemory(a); ok {
			differ += n - same
			of += n
			runs++
		}
	}
	return differ, of, runs
}

// sharedName is the backend the Redis scripts ran on, as a sentence names it.
func (r *results) sharedName() string {
	if slices.Contains(r.backends, "miniredis") {
		return "miniredis"
	}
	return "Redis"
}

// sharedBackend is the backend name of the Redis scripts' runs.
func (r *results) sharedBackend() string {
	if slices.Contains(r.backends, "miniredis") {
		return "miniredis"
	}
	return "redis"
}

// --- rankings ---------------------------------------------------------------
//
// A figure measured in rounds ranks above another only when every round of
// it beat every round of the other: a difference beyond the run-to-run
// spread. Otherwise the report says there is no measurable difference.

// entry is a named figure measured in rounds.
type entry struct {
	name string
	s    spread
}

// standing splits es into the best and the rest: the best is the entry
// with the best median and every entry no measurement shows worse than
// it; the rest, each measurably worse, best first.
func standing(es []entry, higherIsBetter bool) (best, rest []entry) {
	if len(es) == 0 {
		return nil, nil
	}
	es = slices.Clone(es)
	sort.SliceStable(es, func(i, j int) bool {
		if higherIsBetter {
			return es[i].s.median() > es[j].s.median()
		}
		return es[i].s.median() < es[j].s.median()
	})
	for _, e := range es {
		worse := e.s.below(es[0].s)
		if !higherIsBetter {
			worse = es[0].s.below(e.s)
		}
		if worse {
			rest = append(rest, e)
		} else {
			best = append(best, e)
		}
	}
	return best, rest
}

// names is the names of es, in the order of algorithms() (then the
// reference and the peer): a group no measurement tells apart is named in
// the same order on every run.
func names(es []entry) []string {
	rank := map[string]int{xrateName: len(algorithms()), peerName: len(algorithms()) + 1}
	for i, a := range algorithms() {
		rank[a.name] = i
	}
	es = slices.Clone(es)
	sort.SliceStable(es, func(i, j int) bool { return rank[es[i].name] < rank[es[j].name] })
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
	}
	return out
}

// and joins names as a sentence lists them: a, b and c.
func and(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// leaders says who leads es in a sentence: one name with its figure when
// it is measurably ahead of every other, or "no measurable difference
// among ..." when it is not; then the next, measurably behind (several
// when no measurement tells them apart).
func leaders(es []entry, higherIsBetter bool, show func(float64) string) string {
	best, rest := standing(es, higherIsBetter)
	if len(best) == 0 {
		return ""
	}
	var s string
	if len(best) == 1 {
		s = fmt.Sprintf("%s, %s", best[0].name, show(best[0].s.median()))
	} else {
		s = fmt.Sprintf("no measurable difference among %s (%s)", and(names(best)), showRange(best, show))
	}
	if next, _ := standing(rest, higherIsBetter); len(next) > 0 {
		s += fmt.Sprintf("; next: %s, %s", and(names(next)), showRange(next, show))
	}
	return s
}

// showRange is the medians of es, least to most: "52 to 57", or one figure.
func showRange(es []entry, show func(float64) string) string {
	lo, hi := es[0].s.median(), es[0].s.median()
	for _, e := range es {
		lo, hi = min(lo, e.s.median()), max(hi, e.s.median())
	}
	if show(lo) == show(hi) {
		return show(lo)
	}
	return show(lo) + " to " + show(hi)
}

// verdict is e's place beside the best of es, in words.
func verdict(e entry, es []entry, higherIsBetter bool, best, worse string) string {
	top, _ := standing(es, higherIsBetter)
	if len(top) == 0 {
		return "-"
	}
	for _, t := range top {
		if t.name == e.name {
			if len(top) == 1 {
				return best
			}
			return "no measurable difference from the " + best
		}
	}
	return fmt.Sprintf("measurably %s (%.1fx the %s)", worse, e.s.median()/top[0].s.median(), best)
}

// --- the first screen ---------------------------------------------------------

// fmtNs is a spread of nanoseconds: its median, and the rounds' range.
func fmtNs(s spread) string {
	return fmt.Sprintf("%.0f ns (%.0f to %.0f)", s.median(), s.lo(), s.hi())
}

// fmtRate is a spread of decisions per second: its median, and the
// rounds' range.
func fmtRate(s spread) string {
	return fmt.Sprintf("%s/s (%s to %s)", fmtCount(s.median()), fmtCount(s.lo()), fmtCount(s.hi()))
}

// fmtBytes is a spread of bytes per key: its median, and the rounds'
// range when they differ.
func fmtBytes(s spread) string {
	if fmt.Sprintf("%.0f", s.lo()) == fmt.Sprintf("%.0f", s.hi()) {
		return fmt.Sprintf("%.0f B", s.median())
	}
	return fmt.Sprintf("%.0f B (%.0f to %.0f)", s.median(), s.lo(), s.hi())
}

// machine describes what the figures were measured on.
func (r *results) machine() string {
	cpu := ""
	if r.env.cpu != "" {
		cpu = " (" + r.env.cpu + ")"
	}
	redis := r.env.redis
	if redis == "" {
		redis = "no Redis"
	}
	return fmt.Sprintf("%d CPUs%s, %s/%s, Go %s, %s", r.env.cpus, cpu, r.env.goos, r.env.goarch, strings.TrimPrefix(r.env.goVersion, "go"), redis)
}

// measured is the page's first line: when and on what.
func (r *results) measured() string {
	return fmt.Sprintf("Measured %s on %s. Backends: %s.", r.started.UTC().Format("2 January 2006, 15:04 UTC"), r.machine(), strings.Join(r.backends, ", "))
}
