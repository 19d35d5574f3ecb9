package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// cell is a table cell: its text and, for a measured figure, the key of
// its measurement (the same key, the same text, wherever it is shown).
type cell struct{ text, m string }

func cells(ss ...string) []cell {
	out := make([]cell, len(ss))
	for i, s := range ss {
		out[i] = cell{text: s}
	}
	return out
}

// table is a header and rows, rendered as markdown or HTML.
type table struct {
	head []string
	rows [][]cell
}

// section is a part of the report: its text, its charts (HTML) and its
// table, the same in markdown but for the charts.
type section struct {
	id, title string
	paras     []string
	charts    []string
	table     table
	after     []string // paragraphs under the table
}

// costKey names a cost measurement: one key, one figure, everywhere.
func costKey(c cost, metric string) string {
	return fmt.Sprintf("cost/%s/%s/%d/%d/%s", c.backend, c.algorithm, c.goroutines, c.keys, metric)
}

func memKey(f footprint) string { return fmt.Sprintf("memory/%s/%s", f.backend, f.algorithm) }

// sections is the report after its first screen.
func (r *results) sections() []section {
	var ss []section
	if s, ok := r.algorithmsSection(); ok {
		ss = append(ss, s)
	}
	for _, tr := range r.traffics {
		ss = append(ss, r.accuracySection(tr))
	}
	if len(r.scaleOuts) > 0 {
		ss = append(ss, r.scaleOutSection())
	}
	if len(r.memory) > 0 {
		ss = append(ss, r.memorySection())
	}
	if len(r.costNames("memory")) > 0 {
		ss = append(ss, r.memoryCostSection())
	}
	if len(r.costNames("redis")) > 0 {
		ss = append(ss, r.redisCostSection())
	}
	if _, _, ok := r.peerPair(manyKeys); ok {
		ss = append(ss, r.peersSection())
	} else if _, _, ok := r.peerPair(1); ok {
		ss = append(ss, r.peersSection())
	}
	if len(r.spent) > 0 {
		t := table{head: []string{"part", "steps", "seconds"}}
		for _, s := range r.spent {
			t.rows = append(t.rows, cells(s.group, fmt.Sprint(s.steps), fmt.Sprintf("%.1f", s.d.Seconds())))
		}
		ss = append(ss, section{id: "run", title: "This run", table: t,
			paras: []string{fmt.Sprintf("Wall time of each part, %.0fs in all (building the program is not included).", r.elapsed.Seconds())}})
	}
	if len(r.failures) > 0 {
		t := table{head: []string{"step", "error"}}
		for _, f := range r.failures {
			t.rows = append(t.rows, cells(f.step, f.err.Error()))
		}
		ss = append(ss, section{id: "failures", title: "Failed steps", table: t,
			paras: []string{"These steps failed; every other step ran, and the sections above hold what they measured."}})
	}
	return ss
}

// algorithmsSection is every algorithm: its configuration here, what it
// lets through in general, and what this run measured of it.
func (r *results) algorithmsSection() (section, bool) {
	if len(r.accuracy) == 0 && len(r.memory) == 0 {
		return section{}, false
	}
	s := section{id: "algorithms", title: "The algorithms",
		paras: []string{fmt.Sprintf("Every rate algorithm here has the limit of %d per second. Bursts and admits at most: what each lets through whatever its configuration; most in any 1s: the most this run saw it admit within one second, over the %d scenarios.", limit, len(r.traffics))},
		table: table{head: []string{"algorithm", "configuration here", "what it does", "bursts", "admits at most", "most in any 1s here", "bytes per key, memory", "bytes per key, " + r.sharedBackend()}}}
	if note := calendarNote(); note != "" {
		s.paras = append(s.paras, note)
	}
	for _, a := range algorithms() {
		row := cells(a.name, describe(a.cfg), a.note, a.bursts, a.atMost, "-", "-", "-")
		if runs, _ := r.runs(a.name); len(runs) > 0 {
			worst := runs[0]
			for _, x := range runs {
				if x.maxWindow > worst.maxWindow {
					worst = x
				}
			}
			row[5].text = fmt.Sprintf("%d (%s, %s)", worst.maxWindow, fmtRatio(worst.maxWindow), worst.traffic)
		}
		for i, b := range []string{"memory", "redis"} {
			if f, ok := r.footprintOf(a.name, b); ok {
				row[6+i] = cell{fmtBytes(f.bytes), memKey(f)}
			}
		}
		s.table.rows = append(s.table.rows, row)
	}
	return s, true
}

// calendarNote says why the calendar quotas are in no accuracy or
// scale-out section, and where they are; "" when there is none.
func calendarNote() string {
	var notes []string
	for _, a := range algorithms() {
		if a.period == "" {
			continue
		}
		notes = append(notes, fmt.Sprintf("The calendar quota (%s, %s) is in no accuracy or scale-out section: its period is a calendar %s, and those scenarios run seconds, in which it would admit its whole Limit at once and nothing more until the %s ends; %d a %s is no rate of %d/s. Its memory per key and cost per decision are measured with the others'.",
			a.name, describe(a.cfg), a.period, a.period, limit, a.period, limit))
	}
	return strings.Join(notes, " ")
}

// accuracySection is one traffic: what was offered, each algorithm's plot
// with its configuration, and the figures.
func (r *results) accuracySection(tr traffic) section {
	s := section{id: "accuracy-" + tr.name, title: "Accuracy: " + tr.title}
	s.paras = append(s.paras, "Offered: "+tr.offered,
		fmt.Sprintf("Every algorithm is offered the same arrivals on a fake clock that starts on a whole second, so the figures are the same on every run; each has the limit of %d per second, in the configuration under its plot.", limit))
	switch tr.chart {
	case "bins":
		s.paras = append(s.paras, fmt.Sprintf("Plots: offered (grey) and admitted (the algorithm's colour) per %v, as a rate per second; dashed: the limit. Grey above the colour was refused.", bin))
	default:
		s.paras = append(s.paras, "Plots: at every instant, how many were offered (grey) and admitted (the algorithm's colour) in the second before it; dashed: the limit. Colour above the dashed line is more than the limit within one second.")
	}
	if note := r.agreementIn(tr.name); note != "" {
		s.paras = append(s.paras, note)
	}
	var runs []accuracy
	for _, n := range r.rateNames() {
		if a, ok := r.run(tr.name, n); ok {
			runs = append(runs, a)
		}
	}
	if tr.name == "boundary" {
		if pair := edgePair(runs); len(pair) == 2 {
			s.charts = append(s.charts, edgeChart("boundary-edge", tr, pair))
		}
	}
	for _, a := range runs {
		s.charts = append(s.charts, accuracyChart(tr, a, r.duration))
	}
	head := []string{"algorithm", "admitted", "most in any 1s", "most in an aligned second", "aligned seconds given the whole limit"}
	if tr.chart == "bins" {
		head = append(head, fmt.Sprintf("CV per %v", bin))
	}
	head = append(head, r.sharedName()+": same decisions as memory")
	s.table.head = head
	for _, a := range runs {
		row := cells(a.algorithm, fmt.Sprintf("%s of %s", fmtCount(float64(a.admitted)), fmtCount(float64(len(tr.arrivals)))),
			fmt.Sprintf("%d (%s)", a.maxWindow, fmtRatio(a.maxWindow)), fmt.Sprint(a.maxAligned), fmt.Sprintf("%d of %d", a.full, a.wanted))
		if tr.chart == "bins" {
			row = append(row, cell{text: fmt.Sprintf("%.2f", a.cv)})
		}
		row = append(row, cell{text: r.sharedAgreement(tr.name, a.algorithm)})
		s.table.rows = append(s.table.rows, row)
	}
	s.after = append(s.after, fmt.Sprintf("Most in an aligned second: in a second that starts on a whole second of the epoch, where fixed windows start. Aligned seconds given the whole limit: of the seconds offered at least %d, those in which %d were admitted.", limit, limit))
	return s
}

// edgePair is the runs the boundary's edge plot compares: the one that
// admitted the most within 1s and one that admitted the least.
func edgePair(runs []accuracy) []accuracy {
	if len(runs) < 2 {
		return nil
	}
	most, least := runs[0], runs[0]
	for _, a := range runs {
		if a.maxWindow > most.maxWindow {
			most = a
		}
		if a.maxWindow < least.maxWindow || (a.maxWindow == least.maxWindow && a.algorithm == "slidinglog") {
			least = a
		}
	}
	if most.maxWindow == least.maxWindow {
		return nil
	}
	return []accuracy{most, least}
}

// sharedAgreement is how the Redis run of algorithm on traffic decided,
// beside memory's.
func (r *results) sharedAgreement(traffic, algorithm string) string {
	for _, a := range r.accuracy {
		if a.traffic != traffic || a.algorithm != algorithm || a.backend == "memory" {
			continue
		}
		same, n, ok := r.sameAsMemory(a)
		switch {
		case !ok:
			return "-"
		case same == n:
			return "all " + fmtCount(float64(n))
		default:
			return fmt.Sprintf("%d differ (%s admitted)", n-same, fmtCount(float64(a.admitted)))
		}
	}
	return "-"
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

func (r *results) scaleOutSection() section {
	s := section{id: "scaleout", title: "Scale-out: three replicas",
		paras: []string{fmt.Sprintf("Three replicas, each offered %d/s (twice the limit) for %v on one fake clock, each algorithm in the configuration of the accuracy scenarios (The algorithms, above). In memory each replica has a limiter of its own, so together they admit three limits; on %s the three share one key, so they admit one.", int(time.Second/steadyEvery), scaleOutFor, r.sharedName())},
		table: table{head: []string{"algorithm", "one limit admits", "memory: three limiters", r.sharedName() + ": one shared key"}}}
	if note := calendarNote(); note != "" {
		s.paras = append(s.paras, note)
	}
	var bars []bar
	var order []string
	for _, x := range r.scaleOuts {
		if !slices.Contains(order, x.algorithm) {
			order = append(order, x.algorithm)
		}
	}
	var buckets []string
	for _, n := range order {
		a, _ := algorithmNamed(n)
		row := cells(n, fmt.Sprintf("%.0f/s", limit+float64(a.burst)/scaleOutFor.Seconds()), "-", "-")
		if a.burst > 0 {
			buckets = append(buckets, n)
		}
		for _, x := range r.scaleOuts {
			if x.algorithm != n {
				continue
			}
			col, where := 2, "memory, three limiters"
			if x.backend != "memory" {
				col, where = 3, r.sharedName()+", one key"
			}
			row[col].text = fmt.Sprintf("%.0f/s", x.perSecond)
			bars = append(bars, bar{name: n, label: n + ", " + where, value: x.perSecond, text: fmt.Sprintf("%.0f/s", x.perSecond), pale: x.backend != "memory"})
		}
		s.table.rows = append(s.table.rows, row)
	}
	if len(buckets) > 0 {
		s.paras = append(s.paras, fmt.Sprintf("The token buckets (%s) start full: each limit admits its Burst of %d at once, on top of the rate, so over %v one limit admits (%d + %d/s × %v) / %v = %.0f/s. That is what the %.0f/s on %s is, against a rate of %d/s.",
			and(buckets), limit, scaleOutFor, limit, limit, scaleOutFor, scaleOutFor, limit+float64(limit)/scaleOutFor.Seconds(), limit+float64(limit)/scaleOutFor.Seconds(), r.sharedName(), limit))
	}
	keys := barKeys(bars, func(n string) string { return n + ", memory" }, r.sharedName()+", one shared key (pale)")
	keys = append(keys, legendKey{"refs", "one limit and three limits", "#222222", "dash"})
	s.charts = append(s.charts, barChart("", "Admitted per second, the three replicas together", bars, keys,
		[]ref{{limit, fmt.Sprintf("%d/s", limit)}, {3 * limit, fmt.Sprintf("%d/s", 3*limit)}}))
	return s
}

func (r *results) memorySection() section {
	s := section{id: "memory", title: "Memory per key",
		paras: []string{fmt.Sprintf("Memory: the heap held per limiter after one grant, over %s limiters made by one memory.NewFactory, %d rounds. %s: the growth of the server's used_memory per key over %s keys of 17 bytes plus the algorithm's suffix, one grant each, made on 64 connections and read on one of its own once those are closed, less that connection's buffers (mem_clients_normal); %d rounds, each on a server started for it (unless the run was given one, -redis). The configurations are those of the scenarios (on Redis with an hour-long window or refill, and the quota counting per year, so that no key expires before it is counted). A figure is the median of its rounds, with their range when they differ; it ranks below another only when every round of it did.",
			fmtCount(float64(r.memoryKeys("memory"))), heapRounds, r.sharedName(), fmtCount(float64(r.memoryKeys("redis"))), redisHeapRounds)},
		table: table{head: []string{"algorithm", "memory: bytes per key", "", "redis: bytes per key", ""}}}
	var order []string
	for _, m := range r.memory {
		if !slices.Contains(order, m.algorithm) {
			order = append(order, m.algorithm)
		}
	}
	mem, red := r.memoryEntries("memory"), r.memoryEntries("redis")
	var bars []bar
	for _, n := range order {
		row := cells(n, "-", "-", "-", "-")
		a, _ := algorithmNamed(n)
		for i, b := range []struct {
			backend string
			es      []entry
		}{{"memory", mem}, {"redis", red}} {
			f, ok := r.footprintOf(n, b.backend)
			if !ok {
				continue
			}
			row[1+2*i] = cell{fmtBytes(f.bytes), memKey(f)}
			switch {
			case a.rate:
				row[2+2*i].text = verdict(entry{n, f.bytes}, b.es, false, "least", "more")
			case a.period != "":
				row[2+2*i].text = "a calendar quota: not ranked"
			default:
				row[2+2*i].text = "not a rate: not ranked"
			}
			bars = append(bars, bar{name: n, label: n + ", " + b.backend, m: memKey(f), value: f.bytes.median(), lo: f.bytes.lo(), hi: f.bytes.hi(),
				text: fmtBytes(f.bytes), pale: b.backend != "memory"})
		}
		s.table.rows = append(s.table.rows, row)
	}
	s.table.head[2], s.table.head[4] = "beside the least (rate algorithms)", "beside the least (rate algorithms)"
	keys := barKeys(bars, func(n string) string { return n + ", memory" }, "on Redis (pale)")
	s.charts = append(s.charts, barChart("", "Bytes per key (shorter is better)", bars, keys, nil))
	if l := leaders(mem, false, func(v float64) string { return fmt.Sprintf("%.0f B", v) }); l != "" {
		s.after = append(s.after, "Least in memory: "+l+".")
	}
	if l := leaders(red, false, func(v float64) string { return fmt.Sprintf("%.0f B", v) }); l != "" {
		s.after = append(s.after, "Least on Redis: "+l+".")
	}
	return s
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

// costEntries is the costs on backend at g goroutines over keys, as entries
// of figure f.
func (r *results) costEntries(backend string, g, keys int, f func(c cost) spread, skip ...string) []entry {
	var es []entry
	for _, c := range r.costs {
		if c.backend == backend && c.goroutines == g && c.keys == keys && !slices.Contains(skip, c.algorithm) {
			es = append(es, entry{c.algorithm, f(c)})
		}
	}
	return es
}

func nsOf(c cost) spread   { return c.ns }
func rateOf(c cost) spread { return c.perSecond }

// spreadOf says how far the rounds of the costs on backend differed.
func (r *results) spreadOf(backend string) string {
	var widths []float64
	for _, c := range r.costs {
		if c.backend == backend && len(c.ns) > 1 {
			widths = append(widths, c.ns.width())
		}
	}
	if len(widths) == 0 {
		return ""
	}
	return fmt.Sprintf("The run-to-run spread here: a case's fastest and slowest rounds differed by %.0f%% of its median in the median case, %.0f%% at most.", 100*median(slices.Clone(widths)), 100*slices.Max(widths))
}

func (r *results) memoryCostSection() section {
	rounds := 0
	for _, c := range r.costs {
		if c.backend == "memory" {
			rounds = max(rounds, len(c.ns))
		}
	}
	s := section{id: "cost-memory", title: "Cost per decision in memory",
		paras: []string{fmt.Sprintf("Acquire (and Release, for concurrency) on the grant path, in each algorithm's configuration with limits no decision reaches (below). ns per decision: the wall time of the calls with no clock read between them, over the calls of all goroutines (%d CPUs here). x/time/rate's AllowN(time.Now(), 1) includes its clock read, as limitkit's decisions include theirs. %d rounds, the cases taking turns in each, so all see the same machine; a figure is the median of its rounds (the range in brackets), and one ranks below another only when every round of it did.", r.env.cpus, rounds),
			r.spreadOf("memory")},
		table: table{head: []string{"algorithm", "configuration measured", "ns per decision, 1 goroutine", "beside the cheapest", "ns per decision, 8 goroutines", "beside the cheapest", "allocations per decision"}}}
	one := r.costEntries("memory", 1, 0, nsOf)
	eight := r.costEntries("memory", 8, 0, nsOf)
	var bars []bar
	for _, n := range r.costNames("memory") {
		row := cells(n, "AllowN(time.Now(), 1) on rate.NewLimiter(1e9, 1<<40)", "-", "-", "-", "-", "-")
		if a, ok := algorithmNamed(n); ok {
			row[1].text = describe(a.fast)
		}
		for i, g := range []int{1, 8} {
			c, ok := r.costAt(n, "memory", g, 0)
			if !ok {
				continue
			}
			es := one
			if g == 8 {
				es = eight
			}
			row[2+2*i] = cell{fmtNs(c.ns), costKey(c, "ns")}
			row[3+2*i].text = verdict(entry{n, c.ns}, es, false, "cheapest", "dearer")
			if g == 1 {
				row[6].text = fmt.Sprintf("%.1f", c.allocsPerOp)
				bars = append(bars, bar{name: n, label: n, m: costKey(c, "ns"), value: c.ns.median(), lo: c.ns.lo(), hi: c.ns.hi(), text: fmtNs(c.ns)})
			}
		}
		s.table.rows = append(s.table.rows, row)
	}
	s.charts = append(s.charts, barChart("", "In memory, 1 goroutine: ns per decision (shorter is better)", bars, barKeys(bars, func(n string) string { return n }, ""), nil))
	show := func(v float64) string { return fmt.Sprintf("%.0f ns", v) }
	if l := leaders(one, false, show); l != "" {
		s.after = append(s.after, "Cheapest on 1 goroutine: "+l+".")
	}
	if l := leaders(eight, false, show); l != "" {
		s.after = append(s.after, "Cheapest on 8 goroutines: "+l+".")
	}
	return s
}

func (r *results) redisCostSection() section {
	s := section{id: "cost-redis", title: "Cost per decision on Redis",
		paras: []string{fmt.Sprintf("The same decisions on the real server, on loopback, through one go-redis client (PoolSize 128, ContextTimeoutEnabled), each algorithm on a key of its own in the configuration measured in memory. Every call is timed on its own, so the figures include two clock reads and an append per call (well under a microsecond beside a round trip). At %d goroutines, concurrent decisions share script calls. %d rounds, the cases (go-redis/redis_rate's among them) taking turns in each; a figure is the median of its rounds (the range in brackets), and one ranks below another only when every round of it did.", peerGoroutines, redisCostRounds),
			r.spreadOf("redis")},
		table: table{head: []string{"algorithm", "1 goroutine: decisions/s", "p50", "p99", fmt.Sprintf("%d goroutines, one key: decisions/s", peerGoroutines), "p50", "p99", "beside the fastest"}}}
	at64 := r.costEntries("redis", peerGoroutines, 1, rateOf)
	var bars []bar
	for _, n := range r.costNames("redis") {
		row := cells(n, "-", "-", "-", "-", "-", "-", "-")
		measured := false
		for i, g := range []int{1, peerGoroutines} {
			c, ok := r.costAt(n, "redis", g, 1)
			if !ok {
				continue
			}
			measured = true
			row[1+3*i], row[2+3*i], row[3+3*i] = cell{fmtRate(c.perSecond), costKey(c, "rate")}, cell{fmtDur(c.p50), costKey(c, "p50")}, cell{fmtDur(c.p99), costKey(c, "p99")}
			if g == peerGoroutines {
				row[7].text = verdict(entry{n, c.perSecond}, at64, true, "fastest", "slower")
				label := n
				if n == peerName {
					label = "go-redis/redis_rate"
				}
				bars = append(bars, bar{name: n, label: label, m: costKey(c, "rate"), value: c.perSecond.median(), lo: c.perSecond.lo(), hi: c.perSecond.hi(), text: fmtRate(c.perSecond)})
			}
		}
		if measured {
			s.table.rows = append(s.table.rows, row)
		}
	}
	if len(bars) > 0 {
		s.charts = append(s.charts, barChart("", fmt.Sprintf("On Redis, %d goroutines, one key each: decisions per second (longer is better)", peerGoroutines), bars,
			barKeys(bars, func(n string) string { return n }, ""), nil))
	}
	if l := leaders(at64, true, func(v float64) string { return fmtCount(v) + "/s" }); l != "" {
		s.after = append(s.after, fmt.Sprintf("Most decisions per second at %d goroutines: %s.", peerGoroutines, l))
	}
	return s
}

// peerPair is limitkit's token bucket and redis_rate on keys keys at the
// comparison's goroutines.
func (r *results) peerPair(keys int) (ours, theirs cost, ok bool) {
	o, ok1 := r.costAt("tokenbucket", "redis", peerGoroutines, keys)
	t, ok2 := r.costAt(peerName, "redis", peerGoroutines, keys)
	return o, t, ok1 && ok2
}

func keysName(k int) string {
	if k == 1 {
		return "one key"
	}
	return fmtCount(float64(k)) + " keys (one limiter per key)"
}

func (r *results) peersSection() section {
	s := section{id: "peers", title: "limitkit beside go-redis/redis_rate on Redis",
		paras: []string{fmt.Sprintf("The token bucket (redis_rate's GCRA), %d goroutines on one client, a burst neither reaches: limitkit's %s, redis_rate's Limit{Rate: %v, Burst: %d, Period: %v}. On one key, and over %s keys (limitkit: one limiter per key, made by one Factory; redis_rate takes the key per call). These are the measurements of the Redis cost section, the same rounds: the one-key figures are the ones shown there.",
			peerGoroutines, configFast("tokenbucket"), peerLimit.Rate, peerLimit.Burst, peerLimit.Period, fmtCount(manyKeys))},
		table: table{head: []string{"keys", "limitkit decisions/s", "p99", "redis_rate decisions/s", "p99", "limitkit / redis_rate (medians)"}}}
	var bars []bar
	for _, k := range []int{manyKeys, 1} {
		ours, theirs, ok := r.peerPair(k)
		if !ok {
			continue
		}
		ratio := fmt.Sprintf("%.2fx", ours.perSecond.median()/theirs.perSecond.median())
		switch {
		case theirs.perSecond.below(ours.perSecond):
			ratio += ", measurably faster"
		case ours.perSecond.below(theirs.perSecond):
			ratio += ", measurably slower"
		default:
			ratio += ", no measurable difference"
		}
		s.table.rows = append(s.table.rows, []cell{{text: keysName(k)}, {fmtRate(ours.perSecond), costKey(ours, "rate")}, {fmtDur(ours.p99), costKey(ours, "p99")},
			{fmtRate(theirs.perSecond), costKey(theirs, "rate")}, {fmtDur(theirs.p99), costKey(theirs, "p99")}, {text: ratio}})
		short := "1 key"
		if k != 1 {
			short = fmtCount(float64(k)) + " keys"
		}
		for _, c := range []cost{ours, theirs} {
			who := "limitkit tokenbucket"
			if c.algorithm == peerName {
				who = "go-redis/redis_rate"
			}
			bars = append(bars, bar{name: c.algorithm, label: who + ", " + short, m: costKey(c, "rate"), value: c.perSecond.median(), lo: c.perSecond.lo(), hi: c.perSecond.hi(),
				text: fmtRate(c.perSecond)})
		}
	}
	s.charts = append(s.charts, barChart("", fmt.Sprintf("On Redis, %d goroutines: decisions per second (longer is better)", peerGoroutines), bars,
		barKeys(bars, func(n string) string {
			if n == peerName {
				return "go-redis/redis_rate"
			}
			return "limitkit " + n
		}, ""), nil))
	return s
}

// configFast is the cost configuration of name.
func configFast(name string) string {
	if a, ok := algorithmNamed(name); ok {
		return describe(a.fast)
	}
	return ""
}

// --- markdown -----------------------------------------------------------------
