package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The whole program runs once for the tests that read its reports: every
// scenario, on a real redis-server when one is on PATH (miniredis stands in
// otherwise), at a fiftieth of the decisions and 3s of simulated traffic.
var generated struct {
	once   sync.Once
	dir    string
	res    *results
	out    string
	stdout string
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if generated.dir != "" {
		os.RemoveAll(generated.dir)
	}
	os.Exit(code)
}

func generate(t *testing.T) (*results, string, string) {
	t.Helper()
	if os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" && !onPath("redis-server") {
		t.Fatal("real Redis required (RATELIMIT_REQUIRE_REDIS=1): no redis-server on PATH")
	}
	generated.once.Do(func() {
		generated.dir, generated.err = os.MkdirTemp("", "bench-report")
		if generated.err != nil {
			return
		}
		generated.out = filepath.Join(generated.dir, "report.html")
		var stdout bytes.Buffer
		c := config{duration: 3 * time.Second, out: generated.out, seed: 1, scale: 0.02, scenarios: map[string]bool{}}
		for _, s := range strings.Split(allScenarios, ",") {
			c.scenarios[s] = true
		}
		generated.res, generated.err = run(c, &stdout, nil)
		generated.stdout = stdout.String()
	})
	if generated.err != nil {
		t.Fatalf("the program failed: %v\n%s", generated.err, generated.stdout)
	}
	return generated.res, generated.out, generated.stdout
}

// TestProgram checks the reports and the truths any correct run must show.
func TestProgram(t *testing.T) {
	res, out, stdout := generate(t)
	real := slices.Contains(res.backends, "redis")
	want := []string{"## Which one for me", "## The algorithms", "## Accuracy: steady overload", "## Accuracy: a burst on each side of a window edge",
		"## Accuracy: bursts at random moments", "## Scale-out: three replicas", "## Memory per key", "## Cost per decision in memory", "## This run",
		"| fixedwindow |", "\nReport: " + out + "\n"}
	if real {
		want = append(want, "## Cost per decision on Redis", "## limitkit beside go-redis/redis_rate on Redis")
	}
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("markdown lacks %q", w)
		}
	}
	if strings.Contains(stdout, "| miniredis |") && real {
		t.Errorf("miniredis rows beside a real Redis:\n%s", stdout)
	}
	if strings.Contains(stdout, "1 goroutines") {
		t.Errorf("the markdown speaks of 1 goroutines")
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}

	rate := 0
	for _, a := range algorithms() {
		if a.rate {
			rate++
		}
	}
	if got, want := len(res.accuracy), len(res.traffics)*rate*len(res.backends); got != want {
		t.Errorf("%d accuracy runs, want one per traffic, rate algorithm and backend (%d)", got, want)
	}
	for _, a := range res.accuracy {
		if a.algorithm == "slidinglog" && a.maxWindow > limit {
			t.Errorf("%s on %s: the sliding log admitted %d in a window, limit %d", a.traffic, a.backend, a.maxWindow, limit)
		}
		if a.algorithm == "fixedwindow" && a.traffic == "boundary" && a.maxWindow < 19*limit/10 {
			t.Errorf("boundary burst on %s: the fixed window admitted only %d in a window, want about twice the limit", a.backend, a.maxWindow)
		}
		if a.algorithm == "fixedwindow" && (a.maxAligned > limit || a.full != a.wanted) {
			t.Errorf("%s on %s: the fixed window admitted up to %d in an aligned second, the whole limit in %d of %d", a.traffic, a.backend, a.maxAligned, a.full, a.wanted)
		}
		// The arrivals are whole microseconds, so Redis's scripts, deciding
		// on microseconds, decide as memory does.
		if same, n, ok := res.sameAsMemory(a); ok && same != n {
			t.Errorf("%s, %s on %s: %d of %d decisions differ from memory's", a.traffic, a.algorithm, a.backend, n-same, n)
		}
	}
	if differ, _, runs := res.agreement(); runs != len(res.traffics)*rate || differ != 0 {
		t.Errorf("%d runs compared with memory (want %d), %d decisions differ", runs, len(res.traffics)*rate, differ)
	}

	for _, s := range res.scaleOuts {
		if s.perSecond > s.allowed*1.001*map[bool]float64{true: 3, false: 1}[s.backend == "memory"] {
			t.Errorf("%s on %s: three replicas admitted %.0f/s, one limit of its configuration allows %.0f/s", s.algorithm, s.backend, s.perSecond, s.allowed)
		}
		if s.algorithm == "tokenbucket" || s.algorithm == "tokenbucket-interval" {
			continue // buckets admit their burst on top of the rate
		}
		if s.backend == "memory" && s.perSecond < 2.9*limit {
			t.Errorf("%s: three memory replicas admitted %.0f/s, want about 3x the limit", s.algorithm, s.perSecond)
		}
		if s.backend != "memory" && s.perSecond > limit {
			t.Errorf("%s: three replicas sharing %s admitted %.0f/s, limit %d", s.algorithm, s.backend, s.perSecond, limit)
		}
	}

	// Every figure is measured in rounds, and once: one case, one cost.
	seen := map[string]bool{}
	for _, c := range res.costs {
		k := costKey(c, "")
		if seen[k] {
			t.Errorf("%s measured twice", k)
		}
		seen[k] = true
		want := memoryCostRounds
		if c.backend != "memory" {
			want = redisCostRounds
		}
		if len(c.ns) != want || len(c.perSecond) != want {
			t.Errorf("%s: %d rounds, want %d", k, len(c.ns), want)
		}
	}
	for _, f := range res.memory {
		if want := map[string]int{"memory": heapRounds, "redis": redisHeapRounds}[f.backend]; len(f.bytes) != want {
			t.Errorf("%s on %s: %d rounds of memory per key, want %d", f.algorithm, f.backend, len(f.bytes), want)
		}
	}

	if real {
		for _, k := range []int{1, manyKeys} {
			ours, theirs, ok := res.peerPair(k)
			if !ok || ours.perSecond.median() <= 0 || theirs.perSecond.median() <= 0 || ours.p99 <= 0 || theirs.p99 <= 0 {
				t.Errorf("%d keys: limitkit %+v beside redis_rate %+v, want both measured", k, ours, theirs)
			}
		}
		// The one-key token bucket at 64 goroutines is one measurement,
		// shown with the same figure in the Redis costs and beside redis_rate.
		ours, _, _ := res.peerPair(1)
		fig := "| " + fmtRate(ours.perSecond) + " |"
		costs := mdSection(stdout, "## Cost per decision on Redis")
		peers := mdSection(stdout, "## limitkit beside go-redis/redis_rate on Redis")
		if !strings.Contains(costs, fig) || !strings.Contains(peers, fig) {
			t.Errorf("the token bucket on one key at 64 goroutines, %s, is not the figure of both sections:\n%s\n%s", fig, costs, peers)
		}
		for _, c := range res.costs {
			if c.backend == "redis" && (c.p99 <= 0 || c.p99 < c.p50) {
				t.Errorf("%s on Redis at %d goroutines: p50 %v, p99 %v", c.algorithm, c.goroutines, c.p50, c.p99)
			}
			if c.backend == "memory" && c.p99 != 0 {
				t.Errorf("%s in memory: percentiles %v from calls timed one by one, which measure the clock", c.algorithm, c.p99)
			}
		}
		if !strings.HasPrefix(res.env.redis, "Redis ") {
			t.Errorf("Redis version %q", res.env.redis)
		}
	}

	// The first screen names what the algorithms' definitions imply: the
	// sliding log alone exact in any window, the fixed window the whole
	// limit in every aligned second, Redis for a fleet.
	picks, picked := map[string]string{}, map[string][]string{}
	for _, c := range res.choices() {
		picks[c.need], picked[c.need] = c.pick, c.names
	}
	for need, want := range map[string]string{"Exact in any window": "slidinglog", "A hard cap per window": "fixedwindow", "Concurrent work (in flight, not per second)": "concurrency"} {
		if picks[need] != want {
			t.Errorf("first screen: %q chooses %q, want %q", need, picks[need], want)
		}
	}
	if !strings.Contains(picks["One limit for a fleet"], "Redis") {
		t.Errorf("first screen: a fleet chooses %q", picks["One limit for a fleet"])
	}

	// The calendar quota: measured in the cost and memory sections, in no
	// scenario of seconds, not chosen for concurrent work; the sections it
	// is missing from say why.
	calendar := 0
	for _, a := range algorithms() {
		if a.period == "" {
			continue
		}
		calendar++
		if d := describe(a.cfg); !strings.Contains(d, "Period: "+a.period) {
			t.Errorf("%s: period %q, but its configuration is %s", a.name, a.period, d)
		}
		if a.rate {
			t.Errorf("%s is both a rate and a calendar quota", a.name)
		}
		for _, x := range res.accuracy {
			if x.algorithm == a.name {
				t.Errorf("%s has an accuracy run (%s on %s)", a.name, x.traffic, x.backend)
			}
		}
		for _, x := range res.scaleOuts {
			if x.algorithm == a.name {
				t.Errorf("%s has a scale-out run on %s", a.name, x.backend)
			}
		}
		for _, g := range []int{1, 8} {
			if _, ok := res.costAt(a.name, "memory", g, 0); !ok {
				t.Errorf("%s: no cost in memory at %d goroutines", a.name, g)
			}
		}
		for _, b := range res.backends {
			if _, ok := res.footprintOf(a.name, b); !ok {
				t.Errorf("%s: no memory per key on %s", a.name, b)
			}
		}
		if slices.Contains(picked["Concurrent work (in flight, not per second)"], a.name) {
			t.Errorf("first screen: concurrent work chooses %s", a.name)
		}
		row := "| " + a.name + " |"
		for _, h := range []string{"## Memory per key", "## Cost per decision in memory"} {
			if !strings.Contains(mdSection(stdout, h), row) {
				t.Errorf("%s: no %s row", h, a.name)
			}
		}
		for _, h := range []string{"## Accuracy: steady overload", "## Scale-out: three replicas"} {
			if strings.Contains(mdSection(stdout, h), row) {
				t.Errorf("%s: a %s row", h, a.name)
			}
		}
		for _, h := range []string{"## The algorithms", "## Scale-out: three replicas"} {
			if !strings.Contains(mdSection(stdout, h), "The calendar quota ("+a.name+", ") {
				t.Errorf("%s does not say why %s is in no accuracy or scale-out section", h, a.name)
			}
		}
	}
	if calendar == 0 {
		t.Error("no calendar quota among the algorithms")
	}

	var sum time.Duration
	for _, s := range res.spent {
		sum += s.d
	}
	if sum <= 0 || sum > res.elapsed {
		t.Errorf("the parts took %v of a run of %v", sum, res.elapsed)
	}
}

// mdSection is the markdown section under heading, up to the next.
func mdSection(md, heading string) string {
	_, after, ok := strings.Cut(md, heading+"\n")
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(after, "\n## ")
	return s
}

// spreadOf is a figure measured in rounds, the rounds given.
func spreadOf(v ...float64) spread { return spread(v) }

// TestChoicesFollowTheFigures: the first screen's choices are the run's,
// whichever algorithm the figures favour, and a figure within another's
// spread is no ranking.
func TestChoicesFollowTheFigures(t *testing.T) {
	// build gives a the figures of an exact, smooth, capped algorithm and b
	// those of a loose, rough one; memory per key favours a by bytes in
	// memory, ties on Redis (overlapping rounds).
	build := func(a, b string) *results {
		r := &results{backends: []string{"memory", "redis"}}
		for _, tr := range []string{"steady", "boundary", "bursty"} {
			r.traffics = append(r.traffics, traffic{name: tr})
			r.accuracy = append(r.accuracy,
				accuracy{traffic: tr, algorithm: a, backend: "memory", maxWindow: limit, maxAligned: limit, full: 10, wanted: 10, maxBurst: limit, cv: 0.2},
				accuracy{traffic: tr, algorithm: b, backend: "memory", maxWindow: 2 * limit, maxAligned: limit, full: 7, wanted: 10, maxBurst: limit, cv: 0.9})
		}
		r.memory = []footprint{
			{algorithm: a, backend: "memory", bytes: spreadOf(80, 80, 80)}, {algorithm: b, backend: "memory", bytes: spreadOf(96, 96, 96)},
			{algorithm: a, backend: "redis", bytes: spreadOf(135, 140)}, {algorithm: b, backend: "redis", bytes: spreadOf(138, 139)}}
		return r
	}
	for _, tc := range [][2]string{{"slidinglog", "fixedwindow"}, {"fixedwindow", "slidinglog"}} {
		a, b := tc[0], tc[1]
		got := map[string]choice{}
		for _, c := range build(a, b).choices() {
			got[c.need] = c
		}
		for need, want := range map[string]string{"A smooth rate, bursts allowed": a, "A hard cap per window": a, "Exact in any window": a} {
			if c := got[need]; c.pick != want || c.config != configOf(want) {
				t.Errorf("%s beside %s: %q chooses %q (%s), want %q", a, b, need, c.pick, c.config, want)
			}
		}
		// A tie is named in the order of algorithms(), whichever leads.
		if c := got["The least memory per key"]; c.pick != a+" in memory; fixedwindow and slidinglog on Redis" ||
			!strings.Contains(c.why, "On Redis: no measurable difference among fixedwindow and slidinglog") {
			t.Errorf("%s beside %s: least memory chooses %q: %s", a, b, c.pick, c.why)
		}
		if c := got["A hard cap per window"]; !strings.Contains(c.why, fmt.Sprintf("the whole %d in 30 of the 30 seconds", limit)) || !strings.Contains(c.why, "next "+b+": 21") {
			t.Errorf("%s beside %s: the cap's reason: %s", a, b, c.why)
		}
	}
	if cs := (&results{}).choices(); len(cs) != 0 {
		t.Errorf("choices of nothing measured: %+v", cs)
	}
}

// TestChoicesIgnoreTimings: the first screen's choices rest on decisions
// and bytes, never on a timing, so the noise of a busy machine cannot
// change them between runs.
func TestChoicesIgnoreTimings(t *testing.T) {
	res, _, _ := generate(t)
	picks := func(r *results) string {
		var s []string
		for _, c := range r.choices() {
			s = append(s, c.need+": "+c.pick)
		}
		return strings.Join(s, "\n")
	}
	before := picks(res)
	noisy := *res
	noisy.costs = nil
	rng := randSource(7)
	for _, c := range res.costs {
		c.ns, c.perSecond = slices.Clone(c.ns), slices.Clone(c.perSecond)
		for i := range c.ns {
			f := 0.2 + 5*rng.Float64()
			c.ns[i] *= f
			c.perSecond[i] /= f
		}
		noisy.costs = append(noisy.costs, c)
	}
	if after := picks(&noisy); after != before {
		t.Errorf("other timings, other choices:\n%s\nbefore:\n%s", after, before)
	}
}

// TestStanding: one figure ranks above another only when every round of it
// does.
func TestStanding(t *testing.T) {
	es := []entry{{"a", spreadOf(50, 52, 58)}, {"b", spreadOf(55, 57, 60)}, {"c", spreadOf(70, 72, 75)}}
	best, rest := standing(es, false)
	if strings.Join(names(best), ",") != "a,b" || strings.Join(names(rest), ",") != "c" {
		t.Errorf("lower is better: best %v, rest %v", names(best), names(rest))
	}
	best, rest = standing(es, true)
	if strings.Join(names(best), ",") != "c" || strings.Join(names(rest), ",") != "b,a" {
		t.Errorf("higher is better: best %v, rest %v", names(best), names(rest))
	}
	if got := leaders(es, false, func(v float64) string { return fmt.Sprintf("%.0f", v) }); got != "no measurable difference among a and b (52 to 57); next: c, 72" {
		t.Errorf("leaders: %q", got)
	}
	if got := verdict(es[2], es, false, "cheapest", "dearer"); got != "measurably dearer (1.4x the cheapest)" {
		t.Errorf("verdict: %q", got)
	}
}

// TestFailedStepIsNamed: a Redis that does not answer fails its step by
// name, every other step runs, the reports hold what they measured, and the
// report's path is printed as where it is, not where it was asked for.
func TestFailedStepIsNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // nothing listens there now
	dir := t.TempDir()
	t.Chdir(dir)
	var stdout bytes.Buffer
	c := config{duration: 2 * time.Second, out: "report.html", redisAddr: closed, seed: 1, scale: 0.01,
		scenarios: map[string]bool{"memory": true, "cost": true}}
	res, err := run(c, &stdout, nil)
	if err == nil || !strings.Contains(err.Error(), "redis: start and ping the server") {
		t.Fatalf("run: %v, want the Redis step named as failed", err)
	}
	if len(res.failures) != 1 {
		t.Errorf("failures %v, want the Redis step's alone", res.failures)
	}
	if len(res.memory) != len(algorithms()) || len(res.costs) != 2+2*len(algorithms()) {
		t.Errorf("%d memory figures, %d costs: the other steps did not all run", len(res.memory), len(res.costs))
	}
	abs := filepath.Join(dir, "report.html")
	if !strings.Contains(stdout.String(), "\nReport: "+abs+"\n") {
		t.Errorf("the report's path is not printed as %s:\n%s", abs, stdout.String())
	}
	page, err := os.ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Failed steps", "redis: start and ping the server", "Memory per key"} {
		if !bytes.Contains(page, []byte(w)) || !strings.Contains(stdout.String(), w) {
			t.Errorf("the reports lack %q", w)
		}
	}
}

// TestStepsOutliveFailures: a step that errs or panics is recorded by name
// and the rest still run; time is summed per group.
func TestStepsOutliveFailures(t *testing.T) {
	var ran []string
	do := func(name string, err error, panics bool) step {
		return step{group: name[:1], name: name, weight: 1, do: func(ctx context.Context) error {
			ran = append(ran, name)
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("%s: no deadline on its context", name)
			}
			if panics {
				panic("boom")
			}
			return err
		}}
	}
	res := &results{}
	runSteps(res, []step{do("a1", nil, false), do("a2", errors.New("refused"), false), do("b1", nil, true), do("b2", nil, false)}, &progress{})
	if strings.Join(ran, ",") != "a1,a2,b1,b2" {
		t.Errorf("ran %v", ran)
	}
	if len(res.failures) != 2 || res.failures[0].step != "a2" || res.failures[1].step != "b1" || !strings.Contains(res.failures[1].err.Error(), "boom") {
		t.Errorf("failures %v", res.failures)
	}
	if len(res.spent) != 2 || res.spent[0].group != "a" || res.spent[0].steps != 2 || res.spent[1].steps != 2 {
		t.Errorf("spent %+v", res.spent)
	}
}

// TestArrivalsAreWholeMicroseconds: Redis's clock resolution, so memory and
// Redis are offered the same instants.
func TestArrivalsAreWholeMicroseconds(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		for _, tr := range scenarios(10*time.Second, seed) {
			if len(tr.arrivals) == 0 {
				t.Errorf("%s: no arrivals", tr.name)
			}
			for i, at := range tr.arrivals {
				if at%time.Microsecond != 0 || (i > 0 && at < tr.arrivals[i-1]) {
					t.Fatalf("%s, seed %d: arrival %d at %v, after %v", tr.name, seed, i, at, tr.arrivals[max(i-1, 0)])
				}
			}
			offered := 0
			for _, n := range binned(tr.arrivals, 10*time.Second) {
				offered += n
			}
			if offered != len(tr.arrivals) {
				t.Errorf("%s: %d offered in the bins of %d arrivals", tr.name, offered, len(tr.arrivals))
			}
		}
	}
}

// TestStepNames: the steps that progress and failures name count their
// goroutines as English does ("1 goroutine").
func TestStepNames(t *testing.T) {
	c := config{duration: time.Second, seed: 1, scale: 0.01, scenarios: map[string]bool{}}
	for _, s := range strings.Split(allScenarios, ",") {
		c.scenarios[s] = true
	}
	backends := []*backend{{name: "memory"}, {name: "redis", client: goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})}}
	client := backends[1].client.(*goredis.Client)
	defer client.Close()
	steps := plan(c, &results{}, backends, client, "")
	if len(steps) == 0 {
		t.Fatal("no steps")
	}
	for _, s := range steps {
		if strings.Contains(s.name, " 1 goroutines") {
			t.Errorf("step %q", s.name)
		}
	}
}
