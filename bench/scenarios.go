package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"sort"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// limit is every rate algorithm's limit: 100 permits per second.
const limit = 100

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

// backend builds limiters; clock, when set, pins their time.
type backend struct {
	name   string
	client goredis.UniversalClient // nil for memory
	seq    int
}

func (b *backend) build(cfg ratelimit.Config, clock ratelimit.Clock) (ratelimit.Limiter, func(), error) {
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
	var opts []redis.Option
	if clock != nil {
		opts = append(opts, redis.WithClock(clock))
	}
	l, err := redis.New(b.client, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), b.seq), cfg, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}

// --- accuracy -------------------------------------------------------------

// traffic is a scenario's arrival instants, offsets from the start.
type traffic struct {
	name, about string
	arrivals    []time.Duration
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
			bursty = append(bursty, at+time.Duration(i)*50*time.Millisecond/(limit*3/2))
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
	cv                          float64 // coefficient of variation of admitted per 100ms
	bins                        []int   // admitted per 100ms
}

// simulate offers the arrivals to a limiter on a fake clock.
func simulate(b *backend, a algorithm, tr traffic, d time.Duration) (accuracy, error) {
	clock := ratelimittest.NewClock()
	l, closeFn, err := b.build(a.cfg, clock)
	if err != nil {
		return accuracy{}, err
	}
	defer closeFn()
	start := clock.Now()
	var grants []time.Duration
	ctx := context.Background()
	for _, at := range tr.arrivals {
		clock.Set(start.Add(at))
		lease, err := l.Acquire(ctx, 1)
		if err != nil {
			return accuracy{}, err
		}
		if lease.Acquired() {
			grants = append(grants, at)
		}
	}
	r := accuracy{traffic: tr.name, algorithm: a.name, backend: b.name, admitted: len(grants),
		bins: make([]int, int(d/(100*time.Millisecond)))}
	for _, g := range grants {
		if i := int(g / (100 * time.Millisecond)); i < len(r.bins) {
			r.bins[i]++
		}
	}
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

func simulateScaleOut(b *backend, a algorithm, d time.Duration) (scaleOut, error) {
	clock := ratelimittest.NewClock()
	var ls []ratelimit.Limiter
	shared := b.client != nil
	for i := 0; i < 3; i++ {
		if shared && i > 0 {
			ls = append(ls, ls[0]) // the same key: state in Redis
			continue
		}
		l, closeFn, err := b.build(a.cfg, clock)
		if err != nil {
			return scaleOut{}, err
		}
		defer closeFn()
		ls = append(ls, l)
	}
	start := clock.Now()
	admitted := 0
	ctx := context.Background()
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
	nsPerOp            float64
	allocsPerOp        float64
	perSecond          float64
	p50, p99           time.Duration
}

// measure runs op n times on g goroutines.
func measure(g, n int, op func() error) (cost, error) {
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
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	c := cost{goroutines: g, nsPerOp: float64(elapsed.Nanoseconds()) / float64(n),
		allocsPerOp: float64(ms1.Mallocs-ms0.Mallocs-uint64(g)) / float64(n), perSecond: float64(n) / elapsed.Seconds()}
	if len(all) > 0 {
		c.p50, c.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return c, firstErr
}

// costOf measures Acquire (and Release) with limits high enough that every
// decision is a grant.
func costOf(b *backend, a algorithm, g, n int) (cost, error) {
	cfg := a.cfg
	switch c := cfg.(type) { // the same algorithm, never refusing
	case tokenbucket.Config:
		if c.Rate > 0 {
			c.Rate = 1e9
		} else {
			c.PerPeriod = 1 << 40
		}
		c.Burst = 1 << 40
		cfg = c
	case fixedwindow.Config:
		c.Limit = 1 << 40
		cfg = c
	case slidingwindow.Config:
		c.Limit = 1 << 40
		cfg = c
	case slidinglog.Config:
		c.Limit, c.Window = 1<<40, 10*time.Millisecond
		cfg = c
	case concurrency.Config:
		c.Limit = 1 << 40
		cfg = c
	}
	l, closeFn, err := b.build(cfg, nil)
	if err != nil {
		return cost{}, err
	}
	defer closeFn()
	ctx := context.Background()
	c, err := measure(g, n, func() error {
		lease, err := l.Acquire(ctx, 1)
		lease.Release()
		return err
	})
	c.algorithm, c.backend = a.name, b.name
	return c, err
}

// xrateCost is the reference: x/time/rate's AllowN(time.Now(), 1).
func xrateCost(g, n int) cost {
	l := rate.NewLimiter(1e9, 1<<40)
	c, _ := measure(g, n, func() error { l.AllowN(time.Now(), 1); return nil })
	c.algorithm, c.backend = "x/time/rate (reference)", "memory"
	return c
}

// --- memory per key ---------------------------------------------------------

type footprint struct {
	algorithm, backend string
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
	return footprint{algorithm: a.name, backend: "memory", bytesPerKey: per}
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

// redisPerKey is the growth of Redis's used_memory per key over n keys of
// 17 bytes before the algorithm's suffix, one grant each. The keys are
// removed afterwards.
func redisPerKey(client *goredis.Client, a algorithm, n int) (footprint, error) {
	ctx := context.Background()
	var warm sync.WaitGroup // open the pool's connections before measuring
	for g := 0; g < 64; g++ {
		warm.Add(1)
		go func() { defer warm.Done(); client.Ping(ctx) }()
	}
	warm.Wait()
	before, err := redistest.UsedMemory(ctx, client)
	if err != nil {
		return footprint{}, err
	}
	prefix := fmt.Sprintf("b%x:", time.Now().UnixNano()%0xfff)
	ls := make([]*redis.Limiter, n)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := g; k < n; k += 64 {
				l, err := redis.New(client, fmt.Sprintf("k%011d", k), longLived(a.cfg), redis.WithPrefix(prefix))
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
	after, err := redistest.UsedMemory(ctx, client)
	for _, l := range ls {
		l.Close()
	}
	for cursor := uint64(0); ; { // remove the keys, a page at a time
		keys, next, err := client.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return footprint{}, err
		}
		if len(keys) > 0 {
			client.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return footprint{algorithm: a.name, backend: "redis", bytesPerKey: float64(after-before) / float64(n)}, err
}
