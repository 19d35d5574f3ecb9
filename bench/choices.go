package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

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

// chooseConcurrency: concurrent work is the algorithms that are no rate
// and no calendar quota.
func (r *results) chooseConcurrency() (choice, bool) {
	var picked []string
	for _, a := range algorithms() {
		if a.rate || a.period != "" {
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
