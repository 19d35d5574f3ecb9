package main

import (
	"fmt"
	"html"
	"io"
	"math"
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

// colours gives every algorithm (and the reference and peer) one colour,
// the same in every chart of the report.
var colours = map[string]string{
	"tokenbucket":             "#1f77b4",
	"tokenbucket-interval":    "#17becf",
	"fixedwindow":             "#d62728",
	"slidingwindow-segmented": "#ff7f0e",
	"slidingwindow-weighted":  "#8c6d1f",
	"slidinglog":              "#2ca02c",
	"concurrency":             "#9467bd",
	xrateName:                 "#7f7f7f",
	peerName:                  "#e377c2",
}

// offeredColour fills what was offered, behind what was admitted.
const offeredColour = "#d0d0d0"

func colour(name string) string {
	if c, ok := colours[name]; ok {
		return c
	}
	return "#444"
}

// table is a header and rows, rendered as markdown or HTML.
type table struct {
	id, title, about string
	head             []string
	rows             [][]string
}

// is reports whether c was measured on b at g goroutines.
func (c cost) is(b string, g int) bool { return c.backend == b && c.goroutines == g }

// costAt is the cost of algorithm on backend at g goroutines, if measured.
func (r *results) costAt(algorithm, backend string, g int) (cost, bool) {
	for _, c := range r.costs {
		if c.algorithm == algorithm && c.is(backend, g) {
			return c, true
		}
	}
	return cost{}, false
}

// costNames is the algorithms with cost rows, in the order measured.
func (r *results) costNames(backend string) []string {
	var names []string
	seen := map[string]bool{}
	for _, c := range r.costs {
		if c.backend == backend && !seen[c.algorithm] {
			seen[c.algorithm] = true
			names = append(names, c.algorithm)
		}
	}
	return names
}

// sameAsMemory is how many of a's decisions equal those of the same
// algorithm on the same traffic in memory, and of how many; ok is false
// for memory itself or when memory's run is missing.
func (r *results) sameAsMemory(a accuracy) (same, of int, ok bool) {
	if a.backend == "memory" {
		return 0, 0, false
	}
	for _, m := range r.accuracy {
		if m.backend == "memory" && m.traffic == a.traffic && m.algorithm == a.algorithm && len(m.granted) == len(a.granted) {
			for i := range m.granted {
				if m.granted[i] == a.granted[i] {
					same++
				}
			}
			return same, len(a.granted), true
		}
	}
	return 0, 0, false
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

func (r *results) footprintOf(algorithm, backend string) (float64, bool) {
	for _, m := range r.memory {
		if m.algorithm == algorithm && m.backend == backend {
			return m.bytesPerKey, true
		}
	}
	return 0, false
}

// memoryAccuracy is the accuracy runs in memory, by algorithm, in the order run.
func (r *results) memoryAccuracy() (names []string, runs map[string][]accuracy) {
	runs = map[string][]accuracy{}
	for _, a := range r.accuracy {
		if a.backend != "memory" {
			continue
		}
		if _, ok := runs[a.algorithm]; !ok {
			names = append(names, a.algorithm)
		}
		runs[a.algorithm] = append(runs[a.algorithm], a)
	}
	return names, runs
}

// worst is the run of runs with the largest max window.
func worst(runs []accuracy) accuracy {
	w := runs[0]
	for _, a := range runs[1:] {
		if a.maxWindow > w.maxWindow {
			w = a
		}
	}
	return w
}

func (r *results) traffic(name string) traffic {
	for _, tr := range r.traffics {
		if tr.name == name {
			return tr
		}
	}
	return traffic{name: name}
}

// exactWithin is the max window at or under which an algorithm counts as
// never over its limit (the ratio is printed to two places).
const exactWithin = 1.005

// summary is a few sentences for choosing an algorithm, every figure from
// this run; a sentence whose figures were not measured is left out.
func (r *results) summary() []string {
	var out []string
	names, runs := r.memoryAccuracy()
	caveat := func(name string) string {
		if rs, ok := runs[name]; ok {
			if w := worst(rs); w.maxWindow > exactWithin {
				return fmt.Sprintf(", but it admits up to %.2fx the limit in a 1s window (%s)", w.maxWindow, w.traffic)
			}
		}
		return ""
	}
	bytes := func(name string) string {
		var parts []string
		if v, ok := r.footprintOf(name, "memory"); ok {
			parts = append(parts, fmt.Sprintf("%.0f bytes per key in memory", v))
		}
		if v, ok := r.footprintOf(name, "redis"); ok {
			parts = append(parts, fmt.Sprintf("%.0f on Redis", v))
		}
		if len(parts) == 0 {
			return ""
		}
		return ", at " + strings.Join(parts, " and ")
	}
	if len(names) > 0 {
		var exact []string
		loosest := worst(runs[names[0]])
		for _, n := range names {
			w := worst(runs[n])
			if w.maxWindow <= exactWithin && len(runs[n]) == len(r.traffics) { // exact in every scenario run
				exact = append(exact, n+bytes(n))
			}
			if w.maxWindow > loosest.maxWindow {
				loosest = w
			}
		}
		if len(exact) > 0 {
			out = append(out, fmt.Sprintf("Exact in any 1s window (never over the limit in any of the %d scenarios): %s.", len(r.traffics), strings.Join(exact, "; ")))
		} else {
			out = append(out, "No algorithm stayed within its limit in every 1s window.")
		}
		if loosest.maxWindow > exactWithin {
			out = append(out, fmt.Sprintf("Furthest over the limit: %s, %.2fx the limit within one second in the %s scenario (%s).",
				loosest.algorithm, loosest.maxWindow, loosest.traffic, r.traffic(loosest.traffic).about))
		}
		var steady []accuracy
		for _, n := range names {
			for _, a := range runs[n] {
				if a.traffic == "steady" {
					steady = append(steady, a)
				}
			}
		}
		if len(steady) > 1 {
			sort.SliceStable(steady, func(i, j int) bool { return steady[i].cv < steady[j].cv })
			s, rough := steady[0], steady[len(steady)-1]
			// Algorithms whose CVs print the same are named together.
			tied := func(cv float64) []string {
				var names []string
				for _, a := range steady {
					if fmt.Sprintf("%.2f", a.cv) == fmt.Sprintf("%.2f", cv) {
						names = append(names, a.algorithm)
					}
				}
				return names
			}
			smoothest := tied(s.cv)
			note := caveat(s.algorithm)
			if len(smoothest) > 1 { // each tied one's caveat, by name
				note = ""
				for _, n := range smoothest {
					note += strings.Replace(caveat(n), "but it", "but "+n, 1)
				}
			}
			out = append(out, fmt.Sprintf("Smoothest under steady overload: %s (CV of admitted per 100ms %.2f; the roughest, %s, %.2f)%s.",
				and(smoothest), s.cv, and(tied(rough.cv)), rough.cv, note))
		}
	}
	var leastParts []string
	for _, b := range []struct{ backend, where string }{{"memory", "in memory"}, {"redis", "on Redis"}} {
		least := math.Inf(1)
		for _, m := range r.memory {
			if m.backend == b.backend && m.algorithm != "concurrency" {
				least = math.Min(least, m.bytesPerKey)
			}
		}
		var names []string // those whose figure prints as the least's
		for _, m := range r.memory {
			if m.backend == b.backend && m.algorithm != "concurrency" && fmt.Sprintf("%.0f", m.bytesPerKey) == fmt.Sprintf("%.0f", least) {
				names = append(names, m.algorithm)
			}
		}
		note := ""
		for _, n := range names {
			note += strings.Replace(caveat(n), "but it", "but "+n, 1)
		}
		if len(names) > 0 {
			leastParts = append(leastParts, fmt.Sprintf("%s, %s at %.0f bytes per key%s", b.where, and(names), least, note))
		}
	}
	if len(leastParts) > 0 {
		out = append(out, "Least memory per key: "+strings.Join(leastParts, "; ")+".")
	}
	var mem []cost
	for _, c := range r.costs {
		if c.is("memory", 1) && c.algorithm != xrateName && c.algorithm != "concurrency" {
			mem = append(mem, c)
		}
	}
	if len(mem) > 1 {
		sort.SliceStable(mem, func(i, j int) bool { return mem[i].nsPerOp < mem[j].nsPerOp })
		ref := ""
		if x, ok := r.costAt(xrateName, "memory", 1); ok {
			ref = fmt.Sprintf(" (x/time/rate %.0f ns)", x.nsPerOp)
		}
		out = append(out, fmt.Sprintf("Cheapest in memory: %s, %.0f ns per decision on one goroutine%s; the dearest, %s, %.0f ns.",
			mem[0].algorithm, mem[0].nsPerOp, ref, mem[len(mem)-1].algorithm, mem[len(mem)-1].nsPerOp))
	}
	var red []cost
	for _, c := range r.costs {
		if c.is("redis", 64) && c.algorithm != "concurrency" {
			red = append(red, c)
		}
	}
	if len(red) > 1 {
		sort.SliceStable(red, func(i, j int) bool { return red[i].perSecond > red[j].perSecond })
		out = append(out, fmt.Sprintf("On Redis at 64 goroutines: most decisions per second %s, %s/s (p99 %s); fewest %s, %s/s (p99 %s).",
			red[0].algorithm, fmtCount(red[0].perSecond), fmtDur(red[0].p99), red[len(red)-1].algorithm, fmtCount(red[len(red)-1].perSecond), fmtDur(red[len(red)-1].p99)))
	}
	var conc []string
	if c, ok := r.costAt("concurrency", "memory", 1); ok {
		conc = append(conc, fmt.Sprintf("%.0f ns per Acquire and Release in memory", c.nsPerOp))
	}
	if c, ok := r.costAt("concurrency", "redis", 64); ok {
		conc = append(conc, fmt.Sprintf("%s/s on Redis at 64 goroutines (p99 %s)", fmtCount(c.perSecond), fmtDur(c.p99)))
	}
	if len(conc) > 0 {
		out = append(out, "Concurrency bounds what is in flight, not a rate: "+strings.Join(conc, ", ")+".")
	}
	var beside []string
	for _, k := range r.peerKeys() {
		ours, theirs, ok := r.peerPair(k)
		if ok {
			beside = append(beside, fmt.Sprintf("on %s %s/s (p99 %s) against %s/s (p99 %s), %.2fx the throughput",
				keysName(k), fmtCount(ours.perSecond), fmtDur(ours.p99), fmtCount(theirs.perSecond), fmtDur(theirs.p99), ours.perSecond/theirs.perSecond))
		}
	}
	if len(beside) > 0 {
		out = append(out, "limitkit's token bucket beside go-redis/redis_rate, 64 goroutines, same run: "+strings.Join(beside, "; ")+".")
	}
	if len(r.scaleOuts) > 0 {
		var parts []string
		pick := r.scaleOuts[0].algorithm
		for _, n := range names {
			if worst(runs[n]).maxWindow <= exactWithin {
				pick = n
				break
			}
		}
		for _, s := range r.scaleOuts {
			if s.algorithm == pick {
				where := "in memory (a limit each)"
				if s.backend != "memory" {
					where = "sharing one key on " + r.sharedName()
				}
				parts = append(parts, fmt.Sprintf("%.0f/s %s", s.perSecond, where))
			}
		}
		out = append(out, fmt.Sprintf("Three replicas, each offered 2x the limit of %d/s (%s): %s.", limit, pick, strings.Join(parts, ", ")))
	}
	if differ, of, runs := r.agreement(); runs > 0 {
		if differ == 0 {
			out = append(out, fmt.Sprintf("Memory and %s made the same decision on every one of %s arrivals (%d runs): the arrivals are whole microseconds, Redis's clock resolution.", r.sharedName(), fmtCount(float64(of)), runs))
		} else {
			out = append(out, fmt.Sprintf("Memory and %s differ on %d of %s arrivals (%d runs); the accuracy tables say where.", r.sharedName(), differ, fmtCount(float64(of)), runs))
		}
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

// sharedName is the backend the Redis scripts ran on, as a sentence names it.
func (r *results) sharedName() string {
	for _, b := range r.backends {
		if b == "miniredis" {
			return b
		}
	}
	return "Redis"
}

func keysName(k int) string {
	if k == 1 {
		return "one key"
	}
	return fmtCount(float64(k)) + " keys (one limiter per key)"
}

// peerKeys is the key counts of the redis_rate comparison, in the order run.
func (r *results) peerKeys() []int {
	var ks []int
	for _, p := range r.peers {
		if len(ks) == 0 || ks[len(ks)-1] != p.keys {
			ks = append(ks, p.keys)
		}
	}
	return ks
}

func (r *results) peerPair(keys int) (ours, theirs cost, ok bool) {
	var o, t bool
	for _, p := range r.peers {
		if p.keys != keys {
			continue
		}
		if p.algorithm == peerName {
			theirs, t = p, true
		} else {
			ours, o = p, true
		}
	}
	return ours, theirs, o && t
}

func (r *results) tables() []table {
	var ts []table
	if names := r.costNames("memory"); len(names) > 0 {
		t := table{id: "cost-memory", title: "Cost in memory",
			about: fmt.Sprintf("Acquire (and Release, for concurrency) on the grant path, with limits no decision reaches. ns/decision: the wall time of n calls with no clock read between them, over the calls of all goroutines (%d CPUs here). x/time/rate's AllowN(time.Now(), 1) includes its clock read, as limitkit's decisions include theirs.", r.env.cpus),
			head:  []string{"algorithm", "ns/decision, 1 goroutine", "ns/decision, 8 goroutines", "allocs/decision"}}
		for _, n := range names {
			row := []string{n, "-", "-", "-"}
			if c, ok := r.costAt(n, "memory", 1); ok {
				row[1], row[3] = fmt.Sprintf("%.0f", c.nsPerOp), fmt.Sprintf("%.1f", c.allocsPerOp)
			}
			if c, ok := r.costAt(n, "memory", 8); ok {
				row[2] = fmt.Sprintf("%.0f", c.nsPerOp)
			}
			t.rows = append(t.rows, row)
		}
		ts = append(ts, t)
	}
	if names := r.costNames("redis"); len(names) > 0 {
		t := table{id: "cost-redis", title: "Cost on Redis",
			about: "The same decisions on the real server, on loopback, through one go-redis client (PoolSize 128, ContextTimeoutEnabled). Every call is timed on its own, so the figures include two clock reads and an append per call (well under a microsecond beside a round trip). At 64 goroutines, concurrent decisions on one key share one script call. One run per row, one row after another: on a busy machine the rows drift apart; the redis_rate comparison below alternates its cases.",
			head:  []string{"algorithm", "1 goroutine: decisions/s", "p50", "p99", "64 goroutines: decisions/s", "p50", "p99"}}
		for _, n := range names {
			row := []string{n, "-", "-", "-", "-", "-", "-"}
			for i, g := range []int{1, 64} {
				if c, ok := r.costAt(n, "redis", g); ok {
					row[1+3*i], row[2+3*i], row[3+3*i] = fmtCount(c.perSecond), fmtDur(c.p50), fmtDur(c.p99)
				}
			}
			t.rows = append(t.rows, row)
		}
		ts = append(ts, t)
	}
	if len(r.peers) > 0 {
		t := table{id: "peers", title: "limitkit beside go-redis/redis_rate on Redis",
			about: fmt.Sprintf("Token bucket (redis_rate's GCRA), 64 goroutines on one client, a burst neither reaches, one limiter per key (redis_rate takes the key per call); the cases measured in the same run, alternating over %d rounds of %s decisions each (each going first in turn), medians of the rounds. Each call timed on its own, as in the Redis cost table.", peerRounds, fmtCount(peerCalls)),
			head:  []string{"keys", "limitkit decisions/s", "p99", "redis_rate decisions/s", "p99", "limitkit / redis_rate"}}
		for _, k := range r.peerKeys() {
			row := []string{keysName(k), "-", "-", "-", "-", "-"}
			ours, theirs, ok := r.peerPair(k)
			if ours.keys == k {
				row[1], row[2] = fmtCount(ours.perSecond), fmtDur(ours.p99)
			}
			if theirs.keys == k {
				row[3], row[4] = fmtCount(theirs.perSecond), fmtDur(theirs.p99)
			}
			if ok {
				row[5] = fmt.Sprintf("%.2fx", ours.perSecond/theirs.perSecond)
			}
			t.rows = append(t.rows, row)
		}
		ts = append(ts, t)
	}
	for _, tr := range r.traffics {
		t := table{id: "accuracy-" + tr.name, title: "Accuracy: " + tr.name,
			about: fmt.Sprintf("%s: %d requests over %v of simulated time, at whole microseconds, limit %d per second. Max window: the most admitted in any 1s sliding window, as a ratio of the limit. CV: coefficient of variation of admitted per 100ms (lower is smoother). Same as memory: the arrivals decided as the memory backend decided them.", tr.about, len(tr.arrivals), r.duration, limit),
			head:  []string{"algorithm", "backend", "admitted", "max window / limit", "CV per 100ms", "same as memory"}}
		for _, a := range r.accuracy {
			if a.traffic != tr.name {
				continue
			}
			same := "-"
			if s, n, ok := r.sameAsMemory(a); ok && s == n {
				same = "all " + fmtCount(float64(n))
			} else if ok {
				same = fmt.Sprintf("%d of %d", s, n)
			}
			t.rows = append(t.rows, []string{a.algorithm, a.backend, fmt.Sprint(a.admitted), fmt.Sprintf("%.2f", a.maxWindow), fmt.Sprintf("%.2f", a.cv), same})
		}
		ts = append(ts, t)
	}
	if len(r.scaleOuts) > 0 {
		t := table{id: "scaleout", title: "Scale-out: three replicas",
			about: fmt.Sprintf("Each of three replicas is offered 2x the limit of %d/s for 5s. In memory each has its own limiter; on Redis they share one key. Admitted per second, all three together.", limit),
			head:  append([]string{"algorithm"}, r.backends...)}
		var order []string
		at := map[[2]string]float64{}
		for _, s := range r.scaleOuts {
			if !contains(order, s.algorithm) {
				order = append(order, s.algorithm)
			}
			at[[2]string{s.algorithm, s.backend}] = s.perSecond
		}
		for _, a := range order {
			row := []string{a}
			for _, b := range r.backends {
				if v, ok := at[[2]string{a, b}]; ok {
					row = append(row, fmt.Sprintf("%.0f/s", v))
				} else {
					row = append(row, "-")
				}
			}
			t.rows = append(t.rows, row)
		}
		ts = append(ts, t)
	}
	if len(r.memory) > 0 {
		t := table{id: "memory", title: "Memory per key",
			about: fmt.Sprintf("memory: heap per limiter after one grant (%s limiters of one memory.NewFactory). redis: growth of used_memory less the clients' buffers (mem_clients_normal) per key (%s keys of 17 bytes plus the algorithm's suffix), one grant each, on a server started for the algorithm unless the run was given one (-redis).", fmtCount(float64(r.memoryKeys("memory"))), fmtCount(float64(r.memoryKeys("redis")))),
			head:  []string{"algorithm", "memory: bytes per key", "redis: bytes per key"}}
		var order []string
		for _, m := range r.memory {
			if !contains(order, m.algorithm) {
				order = append(order, m.algorithm)
			}
		}
		for _, a := range order {
			row := []string{a, "-", "-"}
			if v, ok := r.footprintOf(a, "memory"); ok {
				row[1] = fmt.Sprintf("%.0f", v)
			}
			if v, ok := r.footprintOf(a, "redis"); ok {
				row[2] = fmt.Sprintf("%.0f", v)
			}
			t.rows = append(t.rows, row)
		}
		ts = append(ts, t)
	}
	if len(r.spent) > 0 {
		t := table{id: "run", title: "This run",
			about: fmt.Sprintf("Wall time of each part, %.0fs in all (building the program is not included).", r.elapsed.Seconds()),
			head:  []string{"part", "steps", "seconds"}}
		for _, s := range r.spent {
			t.rows = append(t.rows, []string{s.group, fmt.Sprint(s.steps), fmt.Sprintf("%.1f", s.d.Seconds())})
		}
		ts = append(ts, t)
	}
	if len(r.failures) > 0 {
		t := table{id: "failures", title: "Failed steps",
			about: "These steps failed; every other step ran, and the tables above hold what they measured.",
			head:  []string{"step", "error"}}
		for _, f := range r.failures {
			t.rows = append(t.rows, []string{f.step, f.err.Error()})
		}
		ts = append(ts, t)
	}
	return ts
}

// memoryKeys is how many keys the memory figures of backend were taken over.
func (r *results) memoryKeys(backend string) int {
	for _, m := range r.memory {
		if m.backend == backend {
			return m.keys
		}
	}
	return 0
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
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
	return fmt.Sprintf("%d CPUs%s, %s/%s, %s, %s", r.env.cpus, cpu, r.env.goos, r.env.goarch, r.env.goVersion, redis)
}

func writeMarkdown(w io.Writer, r *results) {
	fmt.Fprintf(w, "# limitkit algorithm comparison\n\nRun %s on %s. Backends: %s.", r.started.Format(time.RFC3339), r.machine(), strings.Join(r.backends, ", "))
	if len(r.notes) > 0 {
		fmt.Fprintf(w, " %s.", strings.Join(r.notes, ". "))
	}
	fmt.Fprintln(w)
	if s := r.summary(); len(s) > 0 {
		fmt.Fprintf(w, "\n## Summary\n\n- %s\n", strings.Join(s, "\n- "))
	}
	for _, t := range r.tables() {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n| %s |\n|%s\n", t.title, t.about, strings.Join(t.head, " | "), strings.Repeat(" --- |", len(t.head)))
		for _, row := range t.rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
}

// --- charts ---------------------------------------------------------------
//
// Every chart is an SVG that scales to its container (a viewBox, width
// 100%), inside a figure whose caption is its title. What a chart plots
// carries class "data", so a test can tell a chart with data from an empty
// frame.

// figure wraps an SVG of w by h units in a captioned figure of class kind.
func figure(kind, caption string, w, h int, body string) string {
	return fmt.Sprintf(`<figure class="chart %s"><figcaption>%s</figcaption><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" preserveAspectRatio="xMinYMin meet" font-family="sans-serif" font-size="13" role="img" aria-label="%s">%s</svg></figure>`,
		kind, html.EscapeString(caption), w, h, html.EscapeString(caption), body)
}

// bar is one bar of a bar chart, in the colour of name (an algorithm, the
// reference or the peer).
type bar struct {
	name, label, text string
	value             float64
	pale              bool // a second series beside the first (Redis beside memory)
}

// barChart draws one horizontal bar per entry, scaled to the largest.
func barChart(caption string, bars []bar) string {
	const w, right, height, gap = 640, 110, 20, 6
	h := 8 + len(bars)*(height+gap)
	vmax, longest := 0.0, 0
	for _, b := range bars {
		vmax = math.Max(vmax, b.value)
		longest = max(longest, len(b.label))
	}
	left := 12 + longest*7 // room for the longest label, at about 7 units a character

	var s strings.Builder
	for i, b := range bars {
		y := 4 + i*(height+gap)
		bw := math.Max(float64(w-left-right)*b.value/math.Max(vmax, 1e-9), 1)
		opacity := 1.0
		if b.pale {
			opacity = 0.5
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text><rect class="data" data-name="%s" x="%d" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%.1f"/><text x="%.1f" y="%d">%s</text>`,
			left-6, y+height/2+5, html.EscapeString(b.label), html.EscapeString(b.name), left, y, bw, height, colour(b.name), opacity, float64(left)+bw+5, y+height/2+5, html.EscapeString(b.text))
	}
	return figure("bars", caption, w, h, s.String())
}

// binChart draws what was offered (grey) and what algorithm admitted (its
// colour) per bin over time, steps of bin width, with the limit's share of
// a bin dashed.
func binChart(caption string, offered, admitted []int, algorithm string, ref float64) string {
	const w, h, left, right, top, bottom = 400, 170, 34, 8, 8, 22
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	ymax := ref
	for i := range offered {
		ymax = math.Max(ymax, float64(offered[i]))
	}
	for i := range admitted {
		ymax = math.Max(ymax, float64(admitted[i]))
	}
	ymax = math.Ceil(ymax/10) * 10
	n := max(len(offered), len(admitted), 1)
	x := func(i int) float64 { return left + pw*float64(i)/float64(n) }
	y := func(v float64) float64 { return top + ph*(1-v/ymax) }
	var s strings.Builder
	for _, v := range []float64{0, ymax / 2, ymax} {
		fmt.Fprintf(&s, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/><text x="%d" y="%.1f" text-anchor="end" font-size="11">%.0f</text>`,
			left, left+pw, y(v), y(v), left-4, y(v)+4, v)
	}
	secs := float64(n) * bin.Seconds()
	every := math.Max(1, math.Ceil(secs/10))
	for t := 0.0; t <= secs+1e-9; t += every {
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%.0fs</text>`, left+pw*t/secs, h-6, t)
	}
	steps := func(bins []int) string { // a closed step outline over the axis
		var p strings.Builder
		fmt.Fprintf(&p, "M%.1f,%.1f", x(0), y(0))
		for i, v := range bins {
			fmt.Fprintf(&p, "V%.1fH%.1f", y(float64(v)), x(i+1))
		}
		fmt.Fprintf(&p, "V%.1fZ", y(0))
		return p.String()
	}
	c := colour(algorithm)
	fmt.Fprintf(&s, `<path class="data" data-name="offered" d="%s" fill="%s"/>`, steps(offered), offeredColour)
	fmt.Fprintf(&s, `<path class="data" data-name="%s" d="%s" fill="%s" fill-opacity="0.55" stroke="%s" stroke-width="1.2"/>`, html.EscapeString(algorithm), steps(admitted), c, c)
	fmt.Fprintf(&s, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#333" stroke-dasharray="5 4"/>`, left, left+pw, y(ref), y(ref))
	return figure("bins", caption, w, h, s.String())
}

// charts is the HTML charts that go with table t.
func (r *results) charts(t table) string {
	var b strings.Builder
	switch {
	case t.id == "cost-memory":
		var bars []bar
		for _, n := range r.costNames("memory") {
			if c, ok := r.costAt(n, "memory", 1); ok {
				bars = append(bars, bar{name: n, label: n, value: c.nsPerOp, text: fmt.Sprintf("%.0f ns", c.nsPerOp)})
			}
		}
		b.WriteString(barChart("In memory, 1 goroutine: ns per decision (shorter is better)", bars))
	case t.id == "cost-redis":
		var bars []bar
		for _, n := range r.costNames("redis") {
			if c, ok := r.costAt(n, "redis", 64); ok {
				bars = append(bars, bar{name: n, label: n, value: c.perSecond, text: fmtCount(c.perSecond) + "/s"})
			}
		}
		b.WriteString(barChart("On Redis, 64 goroutines: decisions per second (longer is better)", bars))
	case t.id == "peers":
		var bars []bar
		for _, k := range r.peerKeys() {
			for _, p := range r.peers {
				if p.keys == k {
					who := "limitkit " + p.algorithm
					if p.algorithm == peerName {
						who = "go-redis/redis_rate"
					}
					bars = append(bars, bar{name: p.algorithm, label: fmt.Sprintf("%s, %s", who, map[bool]string{true: "1 key", false: fmtCount(float64(k)) + " keys"}[k == 1]),
						value: p.perSecond, text: fmtCount(p.perSecond) + "/s"})
				}
			}
		}
		b.WriteString(barChart("On Redis, 64 goroutines: decisions per second (longer is better)", bars))
	case strings.HasPrefix(t.id, "accuracy-"):
		tr := r.traffic(strings.TrimPrefix(t.id, "accuracy-"))
		fmt.Fprintf(&b, `<p>Offered (grey) and admitted (the algorithm's colour) per 100ms over time, in memory; dashed: the limit's share of 100ms (%d). Grey above the colour is what was refused. %s</p><div class="grid">`,
			limit/10, html.EscapeString(r.agreementIn(tr.name)))
		offered := tr.offered(r.duration)
		for _, a := range r.accuracy {
			if a.traffic == tr.name && a.backend == "memory" {
				b.WriteString(binChart(fmt.Sprintf("%s: %d of %d admitted, max window %.2fx", a.algorithm, a.admitted, len(tr.arrivals), a.maxWindow),
					offered, a.bins, a.algorithm, limit/10))
			}
		}
		b.WriteString("</div>")
	case t.id == "memory":
		var bars []bar
		for _, m := range r.memory {
			bars = append(bars, bar{name: m.algorithm, label: m.algorithm + ", " + m.backend, value: m.bytesPerKey, text: fmt.Sprintf("%.0f B", m.bytesPerKey), pale: m.backend != "memory"})
		}
		b.WriteString(barChart("Bytes per key (solid: memory; pale: Redis)", bars))
	}
	return b.String()
}

// agreementIn says whether the runs off memory decided traffic's arrivals
// as memory did.
func (r *results) agreementIn(name string) string {
	var differ, of int
	var where []string
	for _, a := range r.accuracy {
		if a.traffic != name {
			continue
		}
		if same, n, ok := r.sameAsMemory(a); ok {
			differ += n - same
			of += n
			if same != n {
				where = append(where, fmt.Sprintf("%s on %s: %d", a.algorithm, a.backend, n-same))
			}
		}
	}
	switch {
	case of == 0:
		return ""
	case differ == 0:
		return fmt.Sprintf("%s decided every arrival as memory did (the arrivals are whole microseconds, Redis's clock resolution), so these plots are its too.", r.sharedName())
	default:
		return fmt.Sprintf("%s decided %d arrivals otherwise than memory (%s).", r.sharedName(), differ, strings.Join(where, ", "))
	}
}

func writeHTML(w io.Writer, r *results) error {
	var b strings.Builder
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>limitkit algorithm comparison</title><style>
body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222;padding:0 1em;line-height:1.4}
table{border-collapse:collapse;margin:1em 0;font-size:13px;max-width:100%}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
th{white-space:normal;background:#f3f3f3;font-weight:600}
td:first-child,th:first-child{text-align:left;white-space:normal;overflow-wrap:anywhere}
td:last-child{white-space:normal}
p.about{color:#555}figure{margin:1em 0}figcaption{font-weight:bold;font-size:14px;margin-bottom:.3em}
svg{display:block;width:100%;height:auto}figure.bars{max-width:760px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(280px,1fr));gap:0 12px}
.grid figure{margin:.4em 0}.grid figcaption{font-size:12px;font-weight:normal;min-height:2.6em}
.key{white-space:nowrap;margin-left:.8em}.swatch{display:inline-block;width:.9em;height:.9em;vertical-align:middle;margin-right:.25em}
.failed{color:#b00}
</style></head><body>`)
	fmt.Fprintf(&b, "<h1>limitkit algorithm comparison</h1><p>Run %s on %s. Backends: %s.", r.started.Format(time.RFC3339), html.EscapeString(r.machine()), html.EscapeString(strings.Join(r.backends, ", ")))
	if len(r.notes) > 0 {
		fmt.Fprintf(&b, " %s.", html.EscapeString(strings.Join(r.notes, ". ")))
	}
	b.WriteString("</p>")
	if len(r.failures) > 0 {
		fmt.Fprintf(&b, `<p class="failed">%d step(s) failed; see Failed steps at the end. Everything else was measured.</p>`, len(r.failures))
	}
	if s := r.summary(); len(s) > 0 {
		b.WriteString("<h2>Summary</h2><ul>")
		for _, line := range s {
			fmt.Fprintf(&b, "<li>%s</li>", html.EscapeString(line))
		}
		b.WriteString("</ul>")
	}
	b.WriteString(`<p>Colours:`)
	for _, n := range colourOrder(r) {
		fmt.Fprintf(&b, ` <span class="key"><span class="swatch" style="background:%s"></span>%s</span>`, colour(n), html.EscapeString(n))
	}
	b.WriteString("</p>")
	for _, t := range r.tables() {
		fmt.Fprintf(&b, `<h2 id="%s">%s</h2><p class="about">%s</p>`, t.id, html.EscapeString(t.title), html.EscapeString(t.about))
		b.WriteString(r.charts(t))
		fmt.Fprintf(&b, "<table><tr><th>%s</th></tr>", strings.Join(escape(t.head), "</th><th>"))
		for _, row := range t.rows {
			fmt.Fprintf(&b, "<tr><td>%s</td></tr>", strings.Join(escape(row), "</td><td>"))
		}
		b.WriteString("</table>")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// colourOrder is every name the report colours, in a fixed order.
func colourOrder(r *results) []string {
	names := []string{xrateName}
	for _, a := range algorithms() {
		names = append(names, a.name)
	}
	if len(r.peers) > 0 {
		names = append(names, peerName)
	}
	return names
}

func escape(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = html.EscapeString(s)
	}
	return out
}
