package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// limit is every rate algorithm's limit: 100 permits per second.
const limit = 100

// bin is the width of the bins admissions are counted in.
const bin = 100 * time.Millisecond

func randSource(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }

// algorithm is one configuration compared.
type algorithm struct {
	name string
	cfg  ratelimit.Config
	rate bool // a rate limit (accuracy scenarios apply)
}

func algorithms() []algorithm {
	return []algorithm{
		{"tokenbucket", tokenbucket.Config{Rate: limit, Burst: limit}, true},
		{"tokenbucket-interval", tokenbucket.Config{Period: 100 * time.Millisecond, PerPeriod: limit / 10, Burst: limit}, true},
		{"fixedwindow", fixedwindow.Config{Limit: limit, Window: time.Second}, true},
		{"slidingwindow-segmented", slidingwindow.Config{Limit: limit, Window: time.Second, Segments: 10}, true},
		{"slidingwindow-weighted", slidingwindow.Config{Limit: limit, Window: time.Second}, true},
		{"slidinglog", slidinglog.Config{Limit: limit, Window: time.Second}, true},
		{"concurrency", concurrency.Config{Limit: limit}, false},
	}
}

// backend builds limiters; clock, when set, pins their time. On Redis a
// limiter gets a key of its own, or key when given (replicas sharing one
// limit).
type backend struct {
	name   string
	client goredis.UniversalClient // nil for memory
	seq    int
}

func (b *backend) build(cfg ratelimit.Config, clock ratelimit.Clock, key string) (ratelimit.Limiter, func(), error) {
	if b.client == nil {
		var opts []memory.Option
		if clock != nil {
			opts = append(opts, memory.WithClock(clock))
		}
		l, err := memory.New(cfg, opts...)
		if err != nil {
			return nil, nil, err
		}
		return l, func() { l.Close() }, nil
	}
	b.seq++
	// The step's deadline bounds the calls, not the library's 1s default:
	// a call slowed by a loaded machine must not fail a step.
	opts := []redis.Option{redis.WithTimeout(stepTimeout)}
	if clock != nil {
		opts = append(opts, redis.WithClock(clock))
	}
	if key == "" {
		key = fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), b.seq)
	}
	l, err := redis.New(b.client, key, cfg, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}

// --- accuracy -------------------------------------------------------------

// traffic is a scenario's arrival instants, offsets from the start, in
// whole microseconds: Redis's clock has no finer parts, so memory and Redis
// are offered the same instants and can decide the same.
type traffic struct {
	name, about string
	arrivals    []time.Duration
}

// offered is the arrivals per bin over d.
func (tr traffic) offered(d time.Duration) []int {
	return binned(tr.arrivals, d)
}

// binned counts instants per bin over d.
func binned(ts []time.Duration, d time.Duration) []int {
	bins := make([]int, int(d/bin))
	for _, t := range ts {
		if i := int(t / bin); i < len(bins) {
			bins[i]++
		}
	}
	return bins
}

func scenarios(d time.Duration, rng *rand.Rand) []traffic {
	var steady, boundary, bursty []time.Duration
	for t := time.Duration(0); t < d; t += 5 * time.Millisecond { // 2x the limit
		steady = append(steady, t)
	}
	for k := time.Second; k < d; k += time.Second { // L just before each window edge, L just after
		for i := 0; i < limit; i++ {
			boundary = append(boundary, k-10*time.Millisecond+time.Duration(i)*100*time.Microsecond)
		}
		for i := 0; i < limit; i++ {
			boundary = append(boundary, k+time.Duration(i)*100*time.Microsecond)
		}
	}
	for t := time.Duration(0); t < d; t += 50 * time.Millisecond { // background 20/s
		bursty = append(bursty, t)
	}
	for k := time.Duration(0); k < d; k += time.Second { // a burst of 1.5L in 50ms at a random time each second
		at := k + time.Duration(rng.Int63n(int64(900*time.Millisecond)))
		for i := 0; i < limit*3/2; i++ {
			bursty = append(bursty, (at + time.Duration(i)*50*time.Millisecond/(limit*3/2)).Truncate(time.Microsecond))
		}
	}
	sort.Slice(bursty, func(i, j int) bool { return bursty[i] < bursty[j] })
	return []traffic{
		{"steady", "steady overload: 2x the limit, evenly spaced", steady},
		{"boundary", "boundary burst: the limit just before and just after each second's edge", boundary},
		{"bursty", "bursty: a burst of 1.5x the limit in 50ms each second over 20/s background", bursty},
	}
}

// accuracy is one algorithm's outcome on one traffic on one backend.
type accuracy struct {
	traffic, algorithm, backend string
	admitted                    int
	maxWindow                   float64 // most admitted in any 1s sliding window, over the limit
	cv                          float64 // coefficient of variation of admitted per bin
	bins                        []int   // admitted per bin
	granted                     []bool  // the decision on each arrival
}

// simulate offers the arrivals to a limiter on a fake clock.
func simulate(ctx context.Context, b *backend, a algorithm, tr traffic, d time.Duration) (accuracy, error) {
	clock := ratelimittest.NewClock()
	l, closeFn, err := b.build(a.cfg, clock, "")
	if err != nil {
		return accuracy{}, err
	}
	defer closeFn()
	start := clock.Now()
	var grants []time.Duration
	granted := make([]bool, len(tr.arrivals))
	for i, at := range tr.arrivals {
		clock.Set(start.Add(at))
		lease, err := l.Acquire(ctx, 1)
		if err != nil {
			return accuracy{}, err
		}
		if granted[i] = lease.Acquired(); granted[i] {
			grants = append(grants, at)
		}
	}
	r := accuracy{traffic: tr.name, algorithm: a.name, backend: b.name, admitted: len(grants),
		bins: binned(grants, d), granted: granted}
	r.maxWindow = float64(maxInWindow(grants, time.Second)) / limit
	r.cv = variation(r.bins)
	return r, nil
}

// maxInWindow is the most instants in any window (t-w, t].
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

func variation(bins []int) float64 {
	var sum, sq float64
	for _, b := range bins {
		sum += float64(b)
	}
	mean := sum / float64(len(bins))
	for _, b := range bins {
		sq += (float64(b) - mean) * (float64(b) - mean)
	}
	if mean == 0 {
		return 0
	}
	return math.Sqrt(sq/float64(len(bins))) / mean
}

// --- scale-out ------------------------------------------------------------

// scaleOut: three replicas each offered 2x the limit for d. Memory: each
// has its own limiter; Redis: they share one key.
type scaleOut struct {
	algorithm, backend string
	perSecond          float64
}

func simulateScaleOut(ctx context.Context, b *backend, a algorithm, d time.Duration) (scaleOut, error) {
	clock := ratelimittest.NewClock()
	var ls []ratelimit.Limiter
	key := "" // in memory: a limiter each
	if b.client != nil {
		key = fmt.Sprintf("bench-scaleout-%d", time.Now().UnixNano()) // on Redis: three limiters, one key
	}
	for i := 0; i < 3; i++ {
		l, closeFn, err := b.build(a.cfg, clock, key)
		if err != nil {
			return scaleOut{}, err
		}
		defer closeFn()
		ls = append(ls, l)
	}
	start := clock.Now()
	admitted := 0
	for t := time.Duration(0); t < d; t += 5 * time.Millisecond {
		clock.Set(start.Add(t))
		for _, l := range ls {
			if lease, err := l.Acquire(ctx, 1); err != nil {
				return scaleOut{}, err
			} else if lease.Acquired() {
				admitted++
			}
		}
	}
	return scaleOut{algorithm: a.name, backend: b.name, perSecond: float64(admitted) / d.Seconds()}, nil
}

// --- cost -----------------------------------------------------------------

type cost struct {
	algorithm, backend string
	goroutines         int
	keys               int // Redis keys the decisions spread over (redis_rate comparison)
	nsPerOp            float64
	allocsPerOp        float64
	bytesPerOp         float64 // heap bytes allocated per call, the harness's included
	perSecond          float64
	p50, p99           time.Duration // zero when the calls were not timed one by one
}

// measure runs op n times on g goroutines and times each call, for the
// latency percentiles. The timing (two clock reads and an append, tens of
// nanoseconds) is inside nsPerOp and perSecond: nothing beside a Redis
// round trip, too much beside an in-memory decision, which throughput
// measures.
func measure(g, n int, op func() error) (cost, error) { return measureOps(g, n, true, op) }

// throughput runs op n times on g goroutines with no clock read between
// the calls: nsPerOp and perSecond are the calls' own, and there are no
// percentiles.
func throughput(g, n int, op func() error) (cost, error) { return measureOps(g, n, false, op) }

func measureOps(g, n int, timed bool, op func() error) (cost, error) {
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
	c := cost{goroutines: g, nsPerOp: float64(elapsed.Nanoseconds()) / float64(n),
		allocsPerOp: float64(int64(ms1.Mallocs-ms0.Mallocs)-harnessAllocs) / float64(n),
		bytesPerOp:  float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(n), perSecond: float64(n) / elapsed.Seconds()}
	c.p50, c.p99 = percentiles(all)
	return c, firstErr
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

// unrefusing is cfg's algorithm with limits high enough that every
// decision is a grant.
func unrefusing(cfg ratelimit.Config) ratelimit.Config {
	switch c := cfg.(type) {
	case tokenbucket.Config:
		if c.Rate > 0 {
			c.Rate = 1e9
		} else {
			c.PerPeriod = 1 << 40
		}
		c.Burst = 1 << 40
		return c
	case fixedwindow.Config:
		c.Limit = 1 << 40
		return c
	case slidingwindow.Config:
		c.Limit = 1 << 40
		return c
	case slidinglog.Config:
		c.Limit, c.Window = 1<<40, 10*time.Millisecond
		return c
	case concurrency.Config:
		c.Limit = 1 << 40
		return c
	}
	return cfg
}

// costOf measures Acquire (and Release) on the grant path: in memory with
// no clock reads between calls, on Redis with each call timed.
func costOf(ctx context.Context, b *backend, a algorithm, g, n int) (cost, error) {
	l, closeFn, err := b.build(unrefusing(a.cfg), nil, "")
	if err != nil {
		return cost{}, err
	}
	defer closeFn()
	op := func() error {
		lease, err := l.Acquire(ctx, 1)
		lease.Release()
		return err
	}
	var c cost
	if b.client != nil {
		c, err = measure(g, n, op)
	} else {
		c, err = throughput(g, n, op)
	}
	c.algorithm, c.backend = a.name, b.name
	return c, err
}

// xrateName is the reference's name in the reports.
const xrateName = "x/time/rate"

// xrateCost is the reference: x/time/rate's AllowN(time.Now(), 1), the
// clock read included, as limitkit's decisions include theirs.
func xrateCost(g, n int) cost {
	l := rate.NewLimiter(1e9, 1<<40)
	c, _ := throughput(g, n, func() error { l.AllowN(time.Now(), 1); return nil })
	c.algorithm, c.backend = xrateName, "memory"
	return c
}

// --- limitkit beside go-redis/redis_rate ----------------------------------

const (
	// manyKeys is how many keys the many-keys comparison spreads over.
	manyKeys = 10_000
	// peerCalls is the decisions in one round of a case, and peerRounds
	// the rounds, in which the cases take turns going first.
	peerCalls  = 10_000
	peerRounds = 3
	// peerName is go-redis/redis_rate in the reports.
	peerName = "redis_rate"
)

// redisKeys measures limitkit's token bucket beside go-redis/redis_rate on
// one Redis client, 64 goroutines, over manyKeys keys (one limiter per key,
// made by one Factory; redis_rate's limiter takes the key per call, every
// key in turn) and over one key. Neither state ever expires (a burst of
// 1e9), so both scripts do the same work: read the state and the time,
// write the state. The four cases alternate over rounds rounds of calls
// decisions, each going first in turn, so all see the same machine; each
// figure is the median of its rounds. The keys are removed afterwards.
func redisKeys(ctx context.Context, client *goredis.Client, calls, rounds int) ([]cost, error) {
	prefix := fmt.Sprintf("bench%x-", time.Now().UnixNano()%0xffffff)
	defer unlinkMatching(ctx, client, "*"+prefix+"*")
	names := make([]string, manyKeys)
	for i := range names {
		names[i] = fmt.Sprintf("%suser-%d", prefix, i)
	}
	f, err := redis.NewFactory(client, tokenbucket.Config{Rate: 1000, Burst: 1e9})
	if err != nil {
		return nil, err
	}
	limiters := make([]*redis.Limiter, manyKeys)
	defer func() {
		for _, l := range limiters {
			if l != nil {
				l.Close()
			}
		}
	}()
	for i := range limiters {
		if limiters[i], err = f.New(names[i]); err != nil {
			return nil, err
		}
	}
	theirs := redis_rate.NewLimiter(client)
	lim := redis_rate.Limit{Rate: 1000, Burst: 1e9, Period: time.Second}
	var next atomic.Uint64
	key := func() int { return int(next.Add(1) * 7919 % manyKeys) } // every key in turn, spread
	cases := []struct {
		name string
		keys int
		op   func() error
	}{
		{"tokenbucket", manyKeys, func() error { _, err := limiters[key()].Acquire(ctx, 1); return err }},
		{peerName, manyKeys, func() error { _, err := theirs.Allow(ctx, names[key()], lim); return err }},
		{"tokenbucket", 1, func() error { _, err := limiters[0].Acquire(ctx, 1); return err }},
		{peerName, 1, func() error { _, err := theirs.Allow(ctx, names[0], lim); return err }},
	}
	runs := make([][]cost, len(cases))
	for round := 0; round < rounds; round++ {
		for k := range cases {
			i := (round + k) % len(cases)
			c, err := measure(64, calls, cases[i].op)
			if err != nil {
				return nil, fmt.Errorf("%s on %d key(s): %w", cases[i].name, cases[i].keys, err)
			}
			runs[i] = append(runs[i], c)
		}
	}
	out := make([]cost, len(cases))
	for i, tc := range cases {
		pick := func(f func(c cost) float64) float64 {
			v := make([]float64, len(runs[i]))
			for j, c := range runs[i] {
				v[j] = f(c)
			}
			return median(v)
		}
		out[i] = cost{algorithm: tc.name, backend: "redis", goroutines: 64, keys: tc.keys,
			perSecond:  pick(func(c cost) float64 { return c.perSecond }),
			p50:        time.Duration(pick(func(c cost) float64 { return float64(c.p50) })),
			p99:        time.Duration(pick(func(c cost) float64 { return float64(c.p99) })),
			bytesPerOp: pick(func(c cost) float64 { return c.bytesPerOp })}
		out[i].nsPerOp = 1e9 / out[i].perSecond
	}
	return out, nil
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

type footprint struct {
	algorithm, backend string
	keys               int // how many the figure was taken over
	bytesPerKey        float64
}

// heapPerLimiter is the heap held per in-memory limiter after one grant,
// the limiters made by one memory.Factory, as a partitioned limiter's are.
func heapPerLimiter(a algorithm, n int) footprint {
	var ms0, ms1 runtime.MemStats
	ls := make([]memory.Limiter, n)
	f, _ := memory.NewFactory(a.cfg)
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := range ls {
		ls[i] = f.New()
		ls[i].Acquire(context.Background(), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	per := float64(ms1.HeapAlloc-ms0.HeapAlloc) / float64(n)
	runtime.KeepAlive(ls)
	return footprint{algorithm: a.name, backend: "memory", keys: n, bytesPerKey: per}
}

// longLived is cfg with windows and refills slow enough that a key lives for
// an hour after one grant, so its memory can be read.
func longLived(cfg ratelimit.Config) ratelimit.Config {
	switch c := cfg.(type) {
	case tokenbucket.Config:
		if c.Rate > 0 {
			c.Rate = 0.001
		} else {
			c.Period = time.Hour
		}
		return c
	case fixedwindow.Config:
		c.Window = time.Hour
		return c
	case slidingwindow.Config:
		c.Window = time.Hour
		return c
	case slidinglog.Config:
		c.Window = time.Hour
		return c
	}
	return cfg
}

// redisMemoryKeys is how many keys redisPerKey makes: enough that the
// server's per-key overheads (its dictionaries' slots) are in the figure,
// as many as the peer benchmark's (BenchmarkRedisMemoryPerKey).
const redisMemoryKeys = 50_000

// dataMemory is the server's used_memory less what its clients' buffers
// hold (mem_clients_normal), which grow and shrink with the connections'
// traffic rather than with the keys.
func dataMemory(ctx context.Context, client *goredis.Client) (int64, error) {
	m, err := info(ctx, client, "memory")
	if err != nil {
		return 0, err
	}
	used, err1 := strconv.ParseInt(m["used_memory"], 10, 64)
	clients, err2 := strconv.ParseInt(m["mem_clients_normal"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	return used - clients, nil
}

// info is the fields of one section of the server's INFO.
func info(ctx context.Context, client goredis.UniversalClient, section string) (map[string]string, error) {
	text, err := client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// redisPerKey is the growth of Redis's used_memory (less its clients') per key over n keys of
// 17 bytes before the algorithm's suffix, one grant each. The keys are
// removed afterwards.
func redisPerKey(ctx context.Context, client *goredis.Client, a algorithm, n int) (footprint, error) {
	var warm sync.WaitGroup // open the pool's connections before measuring
	for g := 0; g < 64; g++ {
		warm.Add(1)
		go func() { defer warm.Done(); client.Ping(ctx) }()
	}
	warm.Wait()
	before, err := dataMemory(ctx, client)
	if err != nil {
		return footprint{}, err
	}
	prefix := fmt.Sprintf("b%x:", time.Now().UnixNano()%0xfff)
	ls := make([]*redis.Limiter, n)
	closeAll := func() { // before the keys go, so no release writes them again
		var wg sync.WaitGroup // on 64 goroutines: closing releases held leases, a call each
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for k := g; k < n; k += 64 {
					if ls[k] != nil {
						ls[k].Close()
						ls[k] = nil
					}
				}
			}(g)
		}
		wg.Wait()
	}
	defer closeAll()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := g; k < n; k += 64 {
				l, err := redis.New(client, fmt.Sprintf("k%011d", k), longLived(a.cfg), redis.WithPrefix(prefix), redis.WithTimeout(stepTimeout))
				if err == nil {
					_, err = l.Acquire(ctx, 1)
				}
				if err != nil {
					errs <- err
					return
				}
				ls[k] = l
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return footprint{}, err
	}
	after, err := dataMemory(ctx, client)
	closeAll()
	if err := unlinkMatching(ctx, client, prefix+"*"); err != nil {
		return footprint{}, err
	}
	return footprint{algorithm: a.name, backend: "redis", keys: n, bytesPerKey: float64(after-before) / float64(n)}, err
}
