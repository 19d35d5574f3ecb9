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

// choice answers one need: the algorithms the figures favour, what the
// run measured that favours them, the figure that shows it, and the
// configuration they ran.
type choice struct {
	need   string
	names  []string // the algorithms chosen, for their colours
	pick   string   // the choice in words
	why    string
	fig    string // the id of the section that shows it
	config string
}

// choices is the first screen: for each need, what this run's figures
// favour. Every choice rests on figures that do not move between runs
// (decisions on a fake clock, bytes per key) or on differences beyond the
// measured spread; a need whose figures were not measured is left out.
func (r *results) choices() []choice {
	var out []choice
	for _, f := range []func() (choice, bool){r.chooseSmooth, r.chooseCap, r.chooseExact, r.chooseConcurrency, r.chooseMemory, r.chooseFleet} {
		if c, ok := f(); ok {
			out = append(out, c)
		}
	}
	return out
}

// configs is the configurations of names, one per line.
func configs(names []string) string {
	var out []string
	for _, n := range names {
		out = append(out, configOf(n))
	}
	return strings.Join(out, "\n")
}

// chooseSmooth: a smooth rate with bursts allowed is the algorithm whose
// admissions under steady overload vary least (coefficient of variation
// per bin; equal to two places is a tie), among those that let a burst
// through (half the limit within a burst's span, bursty scenario).
func (r *results) chooseSmooth() (choice, bool) {
	var cands []accuracy
	for _, n := range r.rateNames() {
		s, ok := r.run("steady", n)
		if !ok {
			continue
		}
		if b, ok := r.run("bursty", n); ok && b.maxBurst < limit/2 {
			continue
		}
		cands = append(cands, s)
	}
	if len(cands) == 0 {
		return choice{}, false
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].cv < cands[j].cv })
	cv := func(a accuracy) string { return fmt.Sprintf("%.2f", a.cv) }
	var picked []string
	next := -1
	for i, a := range cands {
		if cv(a) == cv(cands[0]) {
			picked = append(picked, a.algorithm)
		} else if next < 0 {
			next = i
		}
	}
	why := fmt.Sprintf("Under steady overload (twice the limit) the evenest flow: its admissions per %v vary least (CV %s", bin, cv(cands[0]))
	if next >= 0 {
		why += fmt.Sprintf("; next %s, %s", cands[next].algorithm, cv(cands[next]))
	}
	why += ")."
	if b, ok := r.run("bursty", picked[0]); ok {
		why += fmt.Sprintf(" Bursts pass: up to %d within %v (bursty).", b.maxBurst, burstDuration)
	}
	if a, ok := algorithmNamed(picked[0]); ok && a.burst > 0 {
		why += fmt.Sprintf(" It starts full, so its first second held %d (%s): its Burst of %d on top of the rate, as configured.", cands[0].maxWindow, fmtRatio(cands[0].maxWindow), a.burst)
	}
	return choice{need: "A smooth rate, bursts allowed", names: picked, pick: and(picked), why: why, fig: "accuracy-steady", config: configs(picked)}, true
}

// chooseCap: a hard cap per window is, among the algorithms never over the
// limit in a second aligned to the epoch, the one that gave the whole
// limit in the most seconds offered at least the limit.
func (r *results) chooseCap() (choice, bool) {
	type score struct {
		name         string
		full, wanted int
		loosest      int
	}
	var cands []score
	for _, n := range r.rateNames() {
		runs, all := r.runs(n)
		if !all {
			continue
		}
		s := score{name: n}
		capped := true
		for _, a := range runs {
			capped = capped && a.maxAligned <= limit
			s.full += a.full
			s.wanted += a.wanted
			s.loosest = max(s.loosest, a.maxWindow)
		}
		if capped {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		return choice{}, false
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].full > cands[j].full })
	var picked []string
	next := -1
	for i, s := range cands {
		if s.full == cands[0].full {
			picked = append(picked, s.name)
		} else if next < 0 {
			next = i
		}
	}
	top := cands[0]
	why := fmt.Sprintf("Never over %d in a second aligned to the epoch, in %d scenarios, and the whole %d in %d of the %d seconds offered that much",
		limit, len(r.traffics), limit, top.full, top.wanted)
	if next >= 0 {
		why += fmt.Sprintf(" (next %s: %d)", cands[next].name, cands[next].full)
	}
	why += "."
	if top.loosest > limit {
		why += fmt.Sprintf(" Within 1s across a window edge it admitted up to %d (%s).", top.loosest, fmtRatio(top.loosest))
	}
	return choice{need: "A hard cap per window", names: picked, pick: and(picked), why: why, fig: "accuracy-bursty", config: configs(picked)}, true
}

// chooseExact: exact in any window is every algorithm never over the limit
// in any 1s window, in every scenario.
func (r *results) chooseExact() (choice, bool) {
	var picked []string
	for _, n := range r.rateNames() {
		runs, all := r.runs(n)
		if !all {
			continue
		}
		exact := true
		for _, a := range runs {
			exact = exact && a.maxWindow <= limit
		}
		if exact {
			picked = append(picked, n)
		}
	}
	if len(r.traffics) == 0 || len(r.rateNames()) == 0 {
		return choice{}, false
	}
	c := choice{need: "Exact in any window", names: picked, pick: and(picked), fig: "accuracy-boundary", config: configs(picked)}
	if len(picked) == 0 {
		c.pick = "none of those measured"
		c.why = "Every algorithm admitted more than the limit within 1s in some scenario."
		return c, true
	}
	c.why = fmt.Sprintf("Never over %d in any 1s window, in all %d scenarios.", limit, len(r.traffics))
	loosest := accuracy{}
	for _, n := range r.rateNames() {
		if a, ok := r.run("boundary", n); ok && a.maxWindow > loosest.maxWindow {
			loosest = a
		}
	}
	if b, ok := r.run("boundary", picked[0]); ok && loosest.maxWindow > limit {
		c.why += fmt.Sprintf(" Across a window edge: %d (%s), where %s admits %d (%s).", b.maxWindow, fmtRatio(b.maxWindow), loosest.algorithm, loosest.maxWindow, fmtRatio(loosest.maxWindow))
	}
	return c, true
}

// chooseConcurrency: concurrent work is the algorithms that are no rate.
func (r *results) chooseConcurrency() (choice, bool) {
	var picked []string
	for _, a := range algorithms() {
		if a.rate {
			continue
		}
		if _, ok := r.costAt(a.name, "memory", 1, 0); ok {
			picked = append(picked, a.name)
		}
	}
	if len(picked) == 0 {
		return choice{}, false
	}
	why := fmt.Sprintf("The only one that bounds what is held at once (%d, until Release); a rate limit counts arrivals, however many are still running.", limit)
	var costs []string
	if c, ok := r.costAt(picked[0], "memory", 1, 0); ok {
		costs = append(costs, fmt.Sprintf("%s per Acquire and Release in memory", fmtNs(c.ns)))
	}
	if c, ok := r.costAt(picked[0], "redis", peerGoroutines, 1); ok {
		costs = append(costs, fmt.Sprintf("%s on Redis at %d goroutines", fmtRate(c.perSecond), peerGoroutines))
	}
	if len(costs) > 0 {
		why += " Measured: " + strings.Join(costs, ", ") + "."
	}
	return choice{need: "Concurrent work (in flight, not per second)", names: picked, pick: and(picked), why: why, fig: "cost-memory", config: configs(picked)}, true
}

// memoryEntries is the bytes per key of the rate algorithms on backend.
func (r *results) memoryEntries(backend string) []entry {
	var es []entry
	for _, m := range r.memory {
		if a, ok := algorithmNamed(m.algorithm); m.backend == backend && ok && a.rate {
			es = append(es, entry{m.algorithm, m.bytes})
		}
	}
	return es
}

// chooseMemory: the cheapest memory is the rate algorithm with the fewest
// bytes per key, in memory and on Redis, those no measurement shows
// dearer named together.
func (r *results) chooseMemory() (choice, bool) {
	var c choice
	var picks, whys []string
	for _, b := range []struct{ backend, where string }{{"memory", "in memory"}, {"redis", "on Redis"}} {
		es := r.memoryEntries(b.backend)
		if len(es) == 0 {
			continue
		}
		best, rest := standing(es, false)
		picks = append(picks, and(names(best))+" "+b.where)
		for _, n := range names(best) {
			if !slices.Contains(c.names, n) {
				c.names = append(c.names, n)
			}
		}
		w := fmt.Sprintf("%s: %s per key", strings.ToUpper(b.where[:1])+b.where[1:], fmtBytes(best[0].s))
		if len(best) > 1 {
			w = fmt.Sprintf("%s: no measurable difference among %s (%s per key)", strings.ToUpper(b.where[:1])+b.where[1:], and(names(best)), showRange(best, func(v float64) string { return fmt.Sprintf("%.0f B", v) }))
		}
		if next, _ := standing(rest, false); len(next) > 0 {
			w += fmt.Sprintf(", next %s at %s", and(names(next)), showRange(next, func(v float64) string { return fmt.Sprintf("%.0f B", v) }))
		}
		whys = append(whys, w)
	}
	if len(picks) == 0 {
		return choice{}, false
	}
	c.need, c.pick, c.fig, c.config = "The least memory per key", strings.Join(picks, "; "), "memory", configs(c.names)
	c.why = strings.Join(whys, ". ") + "."
	var caveats []string
	for _, n := range c.names {
		runs, _ := r.runs(n)
		worst := 0
		for _, a := range runs {
			worst = max(worst, a.maxWindow)
		}
		if worst > limit {
			caveats = append(caveats, fmt.Sprintf("%s admits up to %s within 1s", n, fmtRatio(worst)))
		}
	}
	if len(caveats) > 0 {
		c.why += " But " + strings.Join(caveats, "; ") + "."
	}
	return c, true
}

// chooseFleet: one limit for a fleet is the Redis backend, whichever
// algorithm: three replicas sharing a key admit one limit.
func (r *results) chooseFleet() (choice, bool) {
	var mem, shared []scaleOut
	for _, s := range r.scaleOuts {
		if a, ok := algorithmNamed(s.algorithm); ok && a.burst > 0 {
			continue // a starting burst on top: said in the scale-out section
		}
		if s.backend == "memory" {
			mem = append(mem, s)
		} else {
			shared = append(shared, s)
		}
	}
	if len(shared) == 0 {
		return choice{}, false
	}
	span := func(ss []scaleOut) string {
		lo, hi := ss[0].perSecond, ss[0].perSecond
		for _, s := range ss {
			lo, hi = math.Min(lo, s.perSecond), math.Max(hi, s.perSecond)
		}
		if fmt.Sprintf("%.0f", lo) == fmt.Sprintf("%.0f", hi) {
			return fmt.Sprintf("%.0f/s", lo)
		}
		return fmt.Sprintf("%.0f to %.0f/s", lo, hi)
	}
	why := fmt.Sprintf("Three replicas, each offered twice the limit of %d/s: %s sharing one key on %s", limit, span(shared), r.sharedName())
	if len(mem) > 0 {
		why += fmt.Sprintf(", where %s in memory, a limit each", span(mem))
	}
	why += " (window algorithms; the buckets add their starting burst)."
	if differ, of, runs := r.agreement(); runs > 0 {
		why += fmt.Sprintf(" %s decided %s of %s arrivals as memory did.", r.sharedName(), fmtCount(float64(of-differ)), fmtCount(float64(of)))
	}
	return choice{need: "One limit for a fleet", pick: "the Redis backend, with the algorithm your need above names", why: why, fig: "scaleout",
		config: "redis.New(client, key, cfg): the same cfg as in memory"}, true
}

// --- figures, formatted -------------------------------------------------------

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
