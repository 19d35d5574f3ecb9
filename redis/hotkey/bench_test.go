package hotkey

import (
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/internal/redistest"
)

// BenchmarkOneKey compares decisions per second on one key under its
// limit (a token bucket of 1e9/s that never refuses: over the limit both
// modes answer refusals locally), leases against the exact limiter of
// package redis (with its coalescing), on one redis-server. Each
// iteration runs a round of each, one after the other: 3 OS processes
// (this test binary again) of 32 goroutines acquiring as fast as they can
// for 1s. It reports each mode's decisions per second for the fleet, their
// ratio, and each mode's script calls per decision, counted by the server
// (INFO commandstats). For a spread, as in bench/README.md:
//
//	go test -run '^$' -bench OneKey -benchtime 3x -count 2 ./redis/hotkey/
func BenchmarkOneKey(b *testing.B) {
	addr := redistest.Standalone(b)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	var decisions, calls [2]int64
	var took [2]time.Duration
	for b.Loop() {
		for m, exact := range []bool{false, true} {
			d, n, t := benchRound(b, c, addr, exact)
			decisions[m] += d
			calls[m] += n
			took[m] += t
		}
	}
	lease, exact := float64(decisions[0])/took[0].Seconds(), float64(decisions[1])/took[1].Seconds()
	b.ReportMetric(lease, "lease-decisions/s")
	b.ReportMetric(exact, "exact-decisions/s")
	b.ReportMetric(lease/exact, "ratio")
	b.ReportMetric(float64(calls[0])/float64(decisions[0]), "lease-calls/decision")
	b.ReportMetric(float64(calls[1])/float64(decisions[1]), "exact-calls/decision")
}

// benchRound runs one round of 3 processes and returns their decisions,
// the script calls the server ran meanwhile, and the round's length.
func benchRound(b *testing.B, c *goredis.Client, addr string, exact bool) (int64, int64, time.Duration) {
	before := scriptCalls(b, c)
	start := time.Now().Add(300 * time.Millisecond) // the processes' start-up
	stop := start.Add(time.Second)
	var procs []*childProc
	for i := 0; i < 3; i++ {
		p := &childProc{cmd: child{addr: addr, key: "bench-" + strconv.FormatBool(exact), cfg: "tokenbucket-fast", exact: exact,
			start: start, stop: stop, goroutines: 32, expiry: DefaultExpiry}.command(), out: &strings.Builder{}}
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, p)
	}
	var decisions int64
	for _, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			b.Fatalf("%v\n%s", err, p.out)
		}
		r, err := parseResult(p.out.String())
		if err != nil {
			b.Fatal(err)
		}
		decisions += r.decisions
	}
	return decisions, scriptCalls(b, c) - before, stop.Sub(start)
}

// scriptCalls is the server's count of script calls (EVALSHA and EVAL).
func scriptCalls(b *testing.B, c *goredis.Client) int64 {
	info, err := c.Info(bg, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			_, rest, _ := strings.Cut(line, "calls=")
			v, _, _ := strings.Cut(rest, ",")
			x, _ := strconv.ParseInt(v, 10, 64)
			n += x
		}
	}
	return n
}
