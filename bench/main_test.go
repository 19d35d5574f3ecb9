package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	real := contains(res.backends, "redis")
	want := []string{"## Summary", "## Cost in memory", "## Accuracy: steady", "## Accuracy: boundary", "## Accuracy: bursty",
		"## Scale-out: three replicas", "## Memory per key", "## This run", "| fixedwindow |", "\nReport: " + out + "\n"}
	if real {
		want = append(want, "## Cost on Redis", "## limitkit beside go-redis/redis_rate on Redis")
	}
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("markdown lacks %q", w)
		}
	}
	if strings.Contains(stdout, "| miniredis |") && real {
		t.Errorf("miniredis rows beside a real Redis:\n%s", stdout)
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
		if a.algorithm == "slidinglog" && a.maxWindow > 1 {
			t.Errorf("%s on %s: the sliding log admitted %.2fx the limit in a window", a.traffic, a.backend, a.maxWindow)
		}
		if a.algorithm == "fixedwindow" && a.traffic == "boundary" && a.maxWindow < 1.9 {
			t.Errorf("boundary burst on %s: the fixed window admitted only %.2fx the limit in a window, want about 2x", a.backend, a.maxWindow)
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

	if real {
		for _, k := range []int{1, manyKeys} {
			ours, theirs, ok := res.peerPair(k)
			if !ok || ours.perSecond <= 0 || theirs.perSecond <= 0 || ours.p99 <= 0 || theirs.p99 <= 0 {
				t.Errorf("%d keys: limitkit %+v beside redis_rate %+v, want both measured", k, ours, theirs)
			}
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

	var sum time.Duration
	for _, s := range res.spent {
		sum += s.d
	}
	if sum <= 0 || sum > res.elapsed {
		t.Errorf("the parts took %v of a run of %v", sum, res.elapsed)
	}
}

// TestSummaryFollowsTheFigures: the summary's choices and figures are the
// run's, whichever algorithm the figures favour.
func TestSummaryFollowsTheFigures(t *testing.T) {
	build := func(exact, loose string, bytesExact float64) *results {
		r := &results{backends: []string{"memory", "redis"}}
		for _, tr := range []string{"steady", "boundary"} {
			r.traffics = append(r.traffics, traffic{name: tr, about: tr + " traffic"})
			r.accuracy = append(r.accuracy,
				accuracy{traffic: tr, algorithm: exact, backend: "memory", maxWindow: 1, cv: 0.9},
				accuracy{traffic: tr, algorithm: loose, backend: "memory", maxWindow: 1.7, cv: 0.2})
		}
		r.memory = []footprint{{algorithm: exact, backend: "memory", bytesPerKey: bytesExact}, {algorithm: exact, backend: "redis", bytesPerKey: 2 * bytesExact},
			{algorithm: loose, backend: "memory", bytesPerKey: 300}}
		return r
	}
	for _, tc := range []struct {
		exact, loose string
		bytes        float64
	}{{"slidinglog", "fixedwindow", 208}, {"fixedwindow", "slidinglog", 77}} {
		s := strings.Join(build(tc.exact, tc.loose, tc.bytes).summary(), "\n")
		for _, w := range []string{
			fmt.Sprintf("Exact in any 1s window (never over the limit in any of the 2 scenarios): %s, at %.0f bytes per key in memory and %.0f on Redis.", tc.exact, tc.bytes, 2*tc.bytes),
			fmt.Sprintf("Furthest over the limit: %s, 1.70x", tc.loose),
			fmt.Sprintf("Smoothest under steady overload: %s (CV of admitted per 100ms 0.20; the roughest, %s, 0.90), but it admits up to 1.70x", tc.loose, tc.exact),
			fmt.Sprintf("Least memory per key: in memory, %s at %.0f bytes per key; on Redis, %s at %.0f bytes per key.", tc.exact, tc.bytes, tc.exact, 2*tc.bytes),
		} {
			if !strings.Contains(s, w) {
				t.Errorf("summary lacks %q:\n%s", w, s)
			}
		}
	}
	if s := (&results{}).summary(); len(s) != 0 {
		t.Errorf("summary of nothing measured: %q", s)
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
		for _, tr := range scenarios(10*time.Second, randSource(seed)) {
			if len(tr.arrivals) == 0 {
				t.Errorf("%s: no arrivals", tr.name)
			}
			for i, at := range tr.arrivals {
				if at%time.Microsecond != 0 || (i > 0 && at < tr.arrivals[i-1]) {
					t.Fatalf("%s, seed %d: arrival %d at %v, after %v", tr.name, seed, i, at, tr.arrivals[max(i-1, 0)])
				}
			}
			offered := 0
			for _, n := range tr.offered(10 * time.Second) {
				offered += n
			}
			if offered != len(tr.arrivals) {
				t.Errorf("%s: %d offered in the bins of %d arrivals", tr.name, offered, len(tr.arrivals))
			}
		}
	}
}
