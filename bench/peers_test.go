package main

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	uberratelimit "go.uber.org/ratelimit"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// Peer benchmarks: each group measures limitkit and its peers in one run.
// Compare runs with benchstat (see README.md).

// BenchmarkTokenBucket: one grant on one goroutine and under RunParallel.
func BenchmarkTokenBucket(b *testing.B) {
	ctx := context.Background()
	ours, _ := memory.New(tokenbucket.Config{Rate: 1e9, Burst: 1 << 40})
	defer ours.Close()
	xr := rate.NewLimiter(1e9, 1<<40)
	uber := uberratelimit.New(1e9, uberratelimit.WithoutSlack)
	store, _ := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Second})
	defer store.Close(ctx)
	ops := []struct {
		name string
		op   func()
	}{
		{"limitkit", func() { ours.Acquire(ctx, 1) }},
		{"x-time-rate", func() { xr.AllowN(time.Now(), 1) }},
		{"uber-ratelimit", func() { uber.Take() }},
		{"go-limiter", func() { store.Take(ctx, "key") }},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				o.op()
			}
		})
		b.Run(o.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o.op()
				}
			})
		})
	}
}

// BenchmarkConcurrency: take and give back one permit.
func BenchmarkConcurrency(b *testing.B) {
	ctx := context.Background()
	ours, _ := memory.New(concurrency.Config{Limit: 1 << 40})
	defer ours.Close()
	sem := semaphore.NewWeighted(1 << 40)
	b.Run("limitkit", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			l, _ := ours.Acquire(ctx, 1)
			l.Release()
		}
	})
	b.Run("x-sync-semaphore", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sem.TryAcquire(1)
			sem.Release(1)
		}
	})
}

// BenchmarkRedis: decisions per second against a redis-server started for
// the benchmark, limitkit and go-redis/redis_rate in the same run, at 1 and
// 64 goroutines. Run with -benchtime=20000x.
func BenchmarkRedis(b *testing.B) {
	addr := redistest.Start(b).Addr
	ctx := context.Background()
	for _, g := range []int{1, 64} {
		cases := []struct {
			name string
			make func(c *goredis.Client) func() error
		}{
			{"limitkit-tokenbucket", func(c *goredis.Client) func() error {
				l, _ := redis.New(c, "ours-tb", tokenbucket.Config{Rate: 1e9, Burst: 1 << 40})
				return func() error { _, err := l.Acquire(ctx, 1); return err }
			}},
			{"limitkit-fixedwindow", func(c *goredis.Client) func() error {
				l, _ := redis.New(c, "ours-fw", fixedwindow.Config{Limit: 1 << 40, Window: time.Second})
				return func() error { _, err := l.Acquire(ctx, 1); return err }
			}},
			{"limitkit-slidingwindow", func(c *goredis.Client) func() error {
				l, _ := redis.New(c, "ours-sw", slidingwindow.Config{Limit: 1 << 40, Window: time.Second})
				return func() error { _, err := l.Acquire(ctx, 1); return err }
			}},
			{"limitkit-tokenbucket-without-coalescing", func(c *goredis.Client) func() error {
				l, _ := redis.New(c, "ours-tbn", tokenbucket.Config{Rate: 1e9, Burst: 1 << 40}, redis.WithoutCoalescing())
				return func() error { _, err := l.Acquire(ctx, 1); return err }
			}},
			{"limitkit-fixedwindow-without-coalescing", func(c *goredis.Client) func() error {
				l, _ := redis.New(c, "ours-fwn", fixedwindow.Config{Limit: 1 << 40, Window: time.Second}, redis.WithoutCoalescing())
				return func() error { _, err := l.Acquire(ctx, 1); return err }
			}},
			{"limitkit-slidingwindow-without-coalescing", func(c *goredis.Client) func() error {
				l, _ := redis.New(c, "ours-swn", slidingwindow.Config{Limit: 1 << 40, Window: time.Second}, redis.WithoutCoalescing())
				return func() error { _, err := l.Acquire(ctx, 1); return err }
			}},
			{"redis_rate", func(c *goredis.Client) func() error {
				l := redis_rate.NewLimiter(c)
				lim := redis_rate.PerSecond(1 << 30)
				return func() error { _, err := l.Allow(ctx, "theirs", lim); return err }
			}},
		}
		for _, tc := range cases {
			b.Run(fmt.Sprintf("%s/goroutines=%d", tc.name, g), func(b *testing.B) {
				c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
				defer c.Close()
				op := tc.make(c)
				op() // load the script
				b.ResetTimer()
				r, err := measure(g, b.N, op)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.perSecond, "decisions/s")
				b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
				b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
			})
		}
	}
}

// BenchmarkRedisLone: one goroutine, the p50 latency of limitkit's token
// bucket against go-redis/redis_rate on the same server and client (b.N is
// ignored: run with -benchtime=1x): with the README's client, which sets
// ContextTimeoutEnabled, and with go-redis's default options, where each
// of limitkit's calls runs in a goroutine so that WithTimeout holds. Each
// comparison is paired: the two take turns call by call, each first in
// turn, so that both see the same load of this machine, in 10 rounds of
// 2,000 calls each. Neither state ever expires (a burst of 1e9), so both
// scripts do the same work: read the state and the time, write the state.
// Reports the medians of the rounds' p50s and of their ratios to
// redis_rate's (below 1: faster), and the client's allocations per call.
func BenchmarkRedisLone(b *testing.B) {
	addr := redistest.Start(b).Addr
	ctx := context.Background()
	cfg := tokenbucket.Config{Rate: 1000, Burst: 1e9}
	lim := redis_rate.Limit{Rate: 1000, Burst: 1e9, Period: time.Second}
	for _, tc := range []struct {
		name string
		opts goredis.Options
	}{
		{"readme-client", goredis.Options{Addr: addr, ContextTimeoutEnabled: true}},
		{"default-options", goredis.Options{Addr: addr}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := goredis.NewClient(&tc.opts)
			defer c.Close()
			ours, err := redis.New(c, "lone-"+tc.name, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer ours.Close()
			theirs := redis_rate.NewLimiter(c)
			ops := [2]func() error{
				func() error { _, err := ours.Acquire(ctx, 1); return err },
				func() error { _, err := theirs.Allow(ctx, "lone-theirs-"+tc.name, lim); return err },
			}
			var allocs [2]float64
			for i, op := range ops {
				r, err := throughput(1, 2000, op)
				if err != nil {
					b.Fatal(err)
				}
				allocs[i] = r.allocsPerOp
			}
			var p50 [2][]float64 // per round, in µs
			var ratio []float64
			for round := 0; round < 10; round++ {
				var lat [2][]time.Duration
				for k := 0; k < 2000; k++ {
					for j := range ops {
						i := (k + j) % 2
						t0 := time.Now()
						if err := ops[i](); err != nil {
							b.Fatal(err)
						}
						lat[i] = append(lat[i], time.Since(t0))
					}
				}
				for i := range lat {
					mid, _ := percentiles(lat[i])
					p50[i] = append(p50[i], float64(mid.Nanoseconds())/1e3)
				}
				ratio = append(ratio, p50[0][round]/p50[1][round])
			}
			b.ReportMetric(allocs[0], "allocs/call-limitkit")
			b.ReportMetric(allocs[1], "allocs/call-redis_rate")
			b.ReportMetric(median(p50[0]), "p50-µs-limitkit")
			b.ReportMetric(median(p50[1]), "p50-µs-redis_rate")
			b.ReportMetric(median(ratio), "p50-ratio")
		})
	}
}

// BenchmarkRedisKeys: decisions per second and p99 latency at 64
// goroutines on one client, over 10,000 keys (one limiter per key, made by
// one Factory; redis_rate's limiter takes the key per call) and over one
// key, limitkit's token bucket against go-redis/redis_rate on one
// redis-server, alternated in 5 rounds of 40,000 decisions each (b.N is
// ignored: run with -benchtime=1x); the bench program's comparison, with
// more rounds. Reports the medians and the ratios to redis_rate
// (throughput: above 1 is faster; p99: below 1 is better), and the heap
// bytes each side's client allocates per decision.
func BenchmarkRedisKeys(b *testing.B) {
	c := newClient(redistest.Start(b).Addr)
	defer c.Close()
	ctx := context.Background()
	bucket, _ := algorithmNamed("tokenbucket")
	cases, done, err := redisCases(ctx, &backend{name: "redis", client: c}, []algorithm{bucket}, peerGoroutines, 40_000, true)
	if err != nil {
		b.Fatal(err)
	}
	defer done()
	costs, err := alternate(ctx, cases, 5)
	if err != nil {
		b.Fatal(err)
	}
	r := &results{costs: costs}
	for _, k := range []int{1, manyKeys} {
		ours, theirs, ok := r.peerPair(k)
		if !ok {
			b.Fatalf("%d keys: the pair was not measured", k)
		}
		name := fmt.Sprintf("%d-keys", k)
		b.ReportMetric(ours.perSecond.median(), "decisions/s-limitkit-"+name)
		b.ReportMetric(theirs.perSecond.median(), "decisions/s-redis_rate-"+name)
		b.ReportMetric(float64(ours.p99.Microseconds()), "p99-µs-limitkit-"+name)
		b.ReportMetric(float64(theirs.p99.Microseconds()), "p99-µs-redis_rate-"+name)
		b.ReportMetric(ours.perSecond.median()/theirs.perSecond.median(), "throughput-ratio-"+name)
		b.ReportMetric(float64(ours.p99)/float64(theirs.p99), "p99-ratio-"+name)
		b.ReportMetric(ours.bytesPerOp, "B/decision-limitkit-"+name)
		b.ReportMetric(theirs.bytesPerOp, "B/decision-redis_rate-"+name)
	}
}

// BenchmarkRedisMemoryPerKey: used_memory per key, limitkit's token bucket
// against redis_rate, 17-byte keys, on a fresh server each.
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	const keys = 50_000
	ctx := context.Background()
	run := func(b *testing.B, op func(c *goredis.Client, k int) error) {
		srv := redistest.Start(b)
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 16})
		defer c.Close()
		op(c, -1) // load the script, open a connection
		before, _ := redistest.UsedMemory(ctx, c)
		for k := 0; k < keys; k++ {
			if err := op(c, k); err != nil {
				b.Fatal(err)
			}
		}
		after, _ := redistest.UsedMemory(ctx, c)
		b.ReportMetric(float64(after-before)/keys, "B/key")
	}
	b.Run("limitkit-tokenbucket", func(b *testing.B) {
		run(b, func(c *goredis.Client, k int) error {
			l, _ := redis.New(c, fmt.Sprintf("k%011d", k), tokenbucket.Config{Rate: 0.001, Burst: 10}, redis.WithPrefix("rl:"))
			_, err := l.Acquire(ctx, 1)
			return err
		})
	})
	b.Run("redis_rate", func(b *testing.B) {
		run(b, func(c *goredis.Client, k int) error {
			// redis_rate stores "rate:" + key; 12-byte keys make 17 bytes.
			_, err := redis_rate.NewLimiter(c).Allow(ctx, fmt.Sprintf("k%011d", k), redis_rate.Limit{Rate: 10, Burst: 10, Period: time.Hour * 10000})
			return err
		})
	})
}

// BenchmarkPartitioned: Acquire on an existing key among 1,000,000
// partitions, against sethvargo/go-limiter's memorystore Take on as many
// keys; and the heap per key of each. The keys are taken in the order they
// were created (which lets the processor prefetch what was allocated in
// that order) and in a random order (every key's state a cache miss).
// limitkit is partitioned over a memory.Factory's limiters;
// limitkit-keyed is memory.NewKeyed, each key's state inline in its index.
// limitkit-limiters-alone is the floor under partitioned's figures: Acquire
// on the same memory limiters held in a slice, in the same orders, with no
// key to look up (its heap per key is the limiter and its slot in the
// slice).
func BenchmarkPartitioned(b *testing.B) {
	const keys = 1_000_000
	ctx := context.Background()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	shuffled := append([]string(nil), names...)
	rand.New(rand.NewSource(1)).Shuffle(keys, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// run fills a store with every key, then takes them in both orders.
	run := func(b *testing.B, fill func(), take func(key string)) {
		h0 := heap()
		fill()
		perKey := float64(heap()-h0) / keys
		for _, order := range []struct {
			name string
			keys []string
		}{{"creation-order", names}, {"random-order", shuffled}} {
			b.Run(order.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					take(order.keys[i%keys])
				}
				b.ReportMetric(perKey, "heap-B/key")
			})
		}
	}
	b.Run("limitkit", func(b *testing.B) {
		f, _ := memory.NewFactory(tokenbucket.Config{Rate: 1e9, Burst: 1 << 40})
		var p *partitioned.Limiter
		run(b, func() {
			p, _ = partitioned.New(partitioned.Config{
				New:         f.ForKey,
				IdleTimeout: time.Hour, MaxPartitions: 2 * keys,
			})
			for _, k := range names {
				p.Acquire(ctx, k, 1)
			}
		}, func(k string) { p.Acquire(ctx, k, 1) })
		p.Close()
	})
	b.Run("limitkit-keyed", func(b *testing.B) {
		var k *memory.Keyed
		run(b, func() {
			k, _ = memory.NewKeyed(tokenbucket.Config{Rate: 1e9, Burst: 1 << 40},
				memory.WithIdleTimeout(time.Hour), memory.WithMaxKeys(2*keys))
			for _, key := range names {
				k.Acquire(ctx, key, 1)
			}
		}, func(key string) { k.Acquire(ctx, key, 1) })
		k.Close()
	})
	b.Run("limitkit-limiters-alone", func(b *testing.B) {
		f, _ := memory.NewFactory(tokenbucket.Config{Rate: 1e9, Burst: 1 << 40})
		created := make([]int, keys)
		for i := range created {
			created[i] = i
		}
		random := append([]int(nil), created...) // the permutation of shuffled
		rand.New(rand.NewSource(1)).Shuffle(keys, func(i, j int) { random[i], random[j] = random[j], random[i] })
		h0 := heap()
		lims := make([]ratelimit.Limiter, keys)
		for i := range lims {
			lims[i], _ = f.ForKey(names[i])
			lims[i].Acquire(ctx, 1)
		}
		perKey := float64(heap()-h0) / keys
		for _, order := range []struct {
			name string
			at   []int
		}{{"creation-order", created}, {"random-order", random}} {
			b.Run(order.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					lims[order.at[i%keys]].Acquire(ctx, 1)
				}
				b.ReportMetric(perKey, "heap-B/key")
			})
		}
	})
	b.Run("go-limiter", func(b *testing.B) {
		var store limiter.Store
		run(b, func() {
			store, _ = memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Second, SweepInterval: time.Hour})
			for _, k := range names {
				store.Take(ctx, k)
			}
		}, func(k string) { store.Take(ctx, k) })
		store.Close(ctx)
	})
}

// BenchmarkRedisPartitioned: Go heap per key of a partitioned limiter over
// Redis (a Factory's limiters, a token bucket), 50,000 keys each granted
// once (b.N is ignored: run with -benchtime=1x). The keys are IPv4
// addresses, as in BenchmarkPartitioned.
func BenchmarkRedisPartitioned(b *testing.B) {
	const keys = 50_000
	addr := redistest.Start(b).Addr
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	f, err := redis.NewFactory(c, tokenbucket.Config{Rate: 1, Burst: 10})
	if err != nil {
		b.Fatal(err)
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	h0 := heap()
	p, err := partitioned.New(partitioned.Config{
		New:         f.ForKey,
		IdleTimeout: time.Hour, MaxPartitions: 2 * keys,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var next atomic.Int64
	if _, err := measure(64, keys, func() error {
		_, err := p.Acquire(ctx, names[next.Add(1)-1], 1)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	if n := p.Stats().Live; n != keys {
		b.Fatalf("%d partitions, want %d", n, keys)
	}
	b.ReportMetric(float64(heap()-h0)/keys, "heap-B/key")
}

// BenchmarkRedisFlood: 64 goroutines hammer one over-limit key for 10s
// (b.N is ignored; run with -benchtime=1x). Reports decisions per second and
// Redis calls per decision, with and without the refusal cache.
func BenchmarkRedisFlood(b *testing.B) {
	addr := redistest.Start(b).Addr
	for _, cache := range []bool{true, false} {
		b.Run(fmt.Sprintf("cache=%v", cache), func(b *testing.B) {
			c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
			defer c.Close()
			var calls atomic.Int64
			c.AddHook(countHook{&calls})
			opts := []redis.Option{}
			if !cache {
				opts = append(opts, redis.WithoutRefusalCache())
			}
			l, _ := redis.New(c, fmt.Sprintf("flood-%v", cache), fixedwindow.Config{Limit: 10, Window: time.Second}, opts...)
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var decisions atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						if _, err := l.Acquire(context.Background(), 1); err != nil {
							b.Error(err)
							return
						}
						decisions.Add(1)
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(decisions.Load())/10, "decisions/s")
			b.ReportMetric(float64(calls.Load())/float64(decisions.Load()), "calls/decision")
		})
	}
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
