package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/redis"
)

// spread is one figure measured in rounds: a value per round.
type spread []float64

// median is the rounds' median (of the middle two when even); 0 for none.
func (s spread) median() float64 {
	if len(s) == 0 {
		return 0
	}
	return median(slices.Clone(s))
}

func (s spread) lo() float64 { return slices.Min(s) }
func (s spread) hi() float64 { return slices.Max(s) }

// below reports whether every round of s is under every round of t: a
// difference beyond the run-to-run spread. Rankings rest on nothing else.
func (s spread) below(t spread) bool { return len(s) > 0 && len(t) > 0 && s.hi() < t.lo() }

// width is the spread's range relative to its median.
func (s spread) width() float64 {
	if len(s) == 0 || s.median() == 0 {
		return 0
	}
	return (s.hi() - s.lo()) / s.median()
}

// cost is one case measured in rounds.
type cost struct {
	algorithm, backend string
	goroutines         int
	keys               int    // Redis keys the decisions spread over (0 in memory)
	ns                 spread // ns per decision, a value per round
	perSecond          spread // decisions per second, a value per round
	allocsPerOp        float64
	bytesPerOp         float64       // heap bytes allocated per call, the harness's included
	p50, p99           time.Duration // medians of the rounds'; zero when the calls were not timed one by one
}

// round is one round of a case.
type round struct {
	ns, perSecond, allocsPerOp, bytesPerOp float64
	p50, p99                               time.Duration
}

// measure runs op n times on g goroutines and times each call, for the
// latency percentiles. The timing (two clock reads and an append, tens of
// nanoseconds) is inside ns and perSecond: nothing beside a Redis round
// trip, too much beside an in-memory decision, which throughput measures.
func measure(g, n int, op func() error) (round, error) { return measureOps(g, n, true, op) }

// throughput runs op n times on g goroutines with no clock read between
// the calls: ns and perSecond are the calls' own, and there are no
// percentiles.
func throughput(g, n int, op func() error) (round, error) { return measureOps(g, n, false, op) }

func measureOps(g, n int, timed bool, op func() error) (round, error) {
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	lat := make([][]time.Duration, g)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if !timed {
				for k := i; k < n; k += g {
					if err := op(); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
				}
				return
			}
			mine := make([]time.Duration, 0, n/g+1)
			for k := i; k < n; k += g {
				t0 := time.Now()
				if err := op(); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat[i] = mine
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	// The harness's own allocations: a goroutine's closure each, and when
	// timed its slice of latencies.
	harnessAllocs := int64(g)
	if timed {
		harnessAllocs += int64(g)
	}
	r := round{ns: float64(elapsed.Nanoseconds()) / float64(n),
		allocsPerOp: float64(int64(ms1.Mallocs-ms0.Mallocs)-harnessAllocs) / float64(n),
		bytesPerOp:  float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(n), perSecond: float64(n) / elapsed.Seconds()}
	r.p50, r.p99 = percentiles(all)
	return r, firstErr
}

// percentiles sorts the latencies d and returns their 50th and 99th
// percentiles; zero for none.
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100]
}

// benchCase is one case of an alternated measurement: op called calls
// times a round on goroutines goroutines, each call timed when timed.
type benchCase struct {
	algorithm, backend string
	goroutines, keys   int
	calls              int
	timed              bool
	op                 func() error
}

// alternate measures the cases in rounds, the cases taking turns (each
// going first in turn) so that all of them see the same machine, busy or
// not; a case's figures are its rounds, and the medians of its rounds. A
// case that fails is left out and named in the error; the others go on.
func alternate(ctx context.Context, cases []benchCase, rounds int) ([]cost, error) {
	runs := make([][]round, len(cases))
	failed := make([]error, len(cases))
	for r := 0; r < rounds; r++ {
		for k := range cases {
			i := (r + k) % len(cases)
			if failed[i] != nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			c := cases[i]
			rd, err := measureOps(c.goroutines, c.calls, c.timed, c.op)
			if err != nil {
				failed[i] = fmt.Errorf("%s on %s, %s: %w", c.algorithm, c.backend, goroutines(c.goroutines), err)
				continue
			}
			runs[i] = append(runs[i], rd)
		}
	}
	var out []cost
	for i, c := range cases {
		if failed[i] != nil {
			continue
		}
		pick := func(f func(r round) float64) spread {
			v := make(spread, len(runs[i]))
			for j, r := range runs[i] {
				v[j] = f(r)
			}
			return v
		}
		out = append(out, cost{algorithm: c.algorithm, backend: c.backend, goroutines: c.goroutines, keys: c.keys,
			ns:          pick(func(r round) float64 { return r.ns }),
			perSecond:   pick(func(r round) float64 { return r.perSecond }),
			allocsPerOp: pick(func(r round) float64 { return r.allocsPerOp }).median(),
			bytesPerOp:  pick(func(r round) float64 { return r.bytesPerOp }).median(),
			p50:         time.Duration(pick(func(r round) float64 { return float64(r.p50) }).median()),
			p99:         time.Duration(pick(func(r round) float64 { return float64(r.p99) }).median())})
	}
	return out, errors.Join(failed...)
}

// goroutines is "1 goroutine", "8 goroutines".
func goroutines(g int) string {
	if g == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", g)
}

// decide is the op of a cost case: Acquire (and Release) on l.
func decide(ctx context.Context, l ratelimit.Limiter) func() error {
	return func() error {
		lease, err := l.Acquire(ctx, 1)
		lease.Release()
		return err
	}
}

// xrateName is the reference's name in the reports.
const xrateName = "x/time/rate"

// memoryCases is the cost cases in memory: x/time/rate's AllowN(time.Now(),
// 1), the clock read included as limitkit's decisions include theirs, and
// every algorithm's Acquire (and Release) with limits no decision reaches,
// at each of gs goroutines, calls calls a round. done closes the limiters.
func memoryCases(ctx context.Context, b *backend, gs []int, calls int) (cases []benchCase, done func(), err error) {
	var closers []func()
	done = func() {
		for _, c := range closers {
			c()
		}
	}
	x := rate.NewLimiter(1e9, 1<<40)
	for _, g := range gs {
		cases = append(cases, benchCase{algorithm: xrateName, backend: "memory", goroutines: g, calls: calls,
			op: func() error { x.AllowN(time.Now(), 1); return nil }})
	}
	for _, a := range algorithms() {
		l, closeFn, err := b.build(a.fast, nil, "")
		if err != nil {
			done()
			return nil, nil, fmt.Errorf("%s: %w", a.name, err)
		}
		closers = append(closers, closeFn)
		for _, g := range gs {
			cases = append(cases, benchCase{algorithm: a.name, backend: "memory", goroutines: g, calls: calls, op: decide(ctx, l)})
		}
	}
	return cases, done, nil
}

// --- limitkit beside go-redis/redis_rate ----------------------------------

const (
	// manyKeys is how many keys the many-keys comparison spreads over.
	manyKeys = 10_000
	// peerName is go-redis/redis_rate in the reports.
	peerName = "redis_rate"
	// peerGoroutines is the goroutines of the Redis comparison.
	peerGoroutines = 64
)

// peerLimit is redis_rate's limit in the comparison: a burst no decision
// reaches, as limitkit's fast token bucket.
var peerLimit = redis_rate.Limit{Rate: 1000, Burst: 1e9, Period: time.Second}

// redisCases is the cases on Redis at g goroutines on one client, calls
// calls a round, each call timed: each of algs on a key of its own; with
// peers, go-redis/redis_rate on one key too, and limitkit's token bucket
// (its fast config) and redis_rate over manyKeys keys (one limiter per key,
// made by one Factory; redis_rate's limiter takes the key per call, every
// key in turn). Neither token bucket's state ever fills, so both scripts do
// the same work: read the state and the time, write the state. done closes
// the limiters and removes the many keys.
func redisCases(ctx context.Context, b *backend, algs []algorithm, g, calls int, peers bool) (cases []benchCase, done func(), err error) {
	var closers []func()
	done = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for _, a := range algs {
		l, closeFn, err := b.build(a.fast, nil, "")
		if err != nil {
			done()
			return nil, nil, fmt.Errorf("%s: %w", a.name, err)
		}
		closers = append(closers, closeFn)
		cases = append(cases, benchCase{algorithm: a.name, backend: b.name, goroutines: g, keys: 1, calls: calls, timed: true, op: decide(ctx, l)})
	}
	if !peers {
		return cases, done, nil
	}
	client, ok := b.client.(*goredis.Client)
	if !ok {
		done()
		return nil, nil, errors.New("the redis_rate comparison needs a *goredis.Client")
	}
	prefix := fmt.Sprintf("bench%x-", time.Now().UnixNano()%0xffffff)
	closers = append(closers, func() { unlinkMatching(context.Background(), client, "*"+prefix+"*") })
	names := make([]string, manyKeys)
	for i := range names {
		names[i] = fmt.Sprintf("%suser-%d", prefix, i)
	}
	var fast ratelimit.Config
	for _, a := range algorithms() {
		if a.name == "tokenbucket" {
			fast = a.fast
		}
	}
	f, err := redis.NewFactory(client, fast, redis.WithTimeout(stepTimeout))
	if err != nil {
		done()
		return nil, nil, err
	}
	limiters := make([]*redis.Limiter, manyKeys)
	closers = append(closers, func() {
		for _, l := range limiters {
			if l != nil {
				l.Close()
			}
		}
	})
	for i := range limiters {
		if limiters[i], err = f.New(names[i]); err != nil {
			done()
			return nil, nil, err
		}
	}
	theirs := redis_rate.NewLimiter(client)
	one := fmt.Sprintf("bench%x-one", time.Now().UnixNano()%0xffffff)
	var next atomic.Uint64
	key := func() int { return int(next.Add(1) * 7919 % manyKeys) } // every key in turn, spread
	cases = append(cases,
		benchCase{algorithm: peerName, backend: b.name, goroutines: g, keys: 1, calls: calls, timed: true,
			op: func() error { _, err := theirs.Allow(ctx, one, peerLimit); return err }},
		benchCase{algorithm: "tokenbucket", backend: b.name, goroutines: g, keys: manyKeys, calls: calls, timed: true,
			op: func() error { _, err := limiters[key()].Acquire(ctx, 1); return err }},
		benchCase{algorithm: peerName, backend: b.name, goroutines: g, keys: manyKeys, calls: calls, timed: true,
			op: func() error { _, err := theirs.Allow(ctx, names[key()], peerLimit); return err }})
	closers = append(closers, func() { client.Unlink(context.Background(), "rate:"+one) })
	return cases, done, nil
}

// median is the median of v (of the middle two when even), sorting v.
func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// unlinkMatching removes the keys matching pattern, a page at a time.
func unlinkMatching(ctx context.Context, client *goredis.Client, pattern string) error {
	for cursor := uint64(0); ; {
		keys, next, err := client.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			client.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// --- memory per key ---------------------------------------------------------
