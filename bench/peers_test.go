package main

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sort"
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

// BenchmarkRedisLone: one goroutine, coalescing on and off, alternated in
// 20 rounds of 2,000 calls (b.N is ignored: run with -benchtime=1x), so
// that both see the same machine. Reports the median µs per call of each
// and their ratio.
func BenchmarkRedisLone(b *testing.B) {
	addr := redistest.Start(b).Addr
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	cfg := tokenbucket.Config{Rate: 1e9, Burst: 1 << 40}
	with, _ := redis.New(c, "lone-with", cfg)
	without, _ := redis.New(c, "lone-without", cfg, redis.WithoutCoalescing())
	limiters := []*redis.Limiter{with, without}
	var us [2][]float64
	for round := 0; round < 20; round++ {
		for k := 0; k < 2; k++ {
			i := (round + k) % 2 // each goes first in half the rounds
			t0 := time.Now()
			for n := 0; n < 2000; n++ {
				if _, err := limiters[i].Acquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
			}
			us[i] = append(us[i], float64(time.Since(t0).Microseconds())/2000)
		}
	}
	median := func(v []float64) float64 { sort.Float64s(v); return (v[len(v)/2-1] + v[len(v)/2]) / 2 }
	w, wo := median(us[0]), median(us[1])
	b.ReportMetric(w, "µs/call-coalescing")
	b.ReportMetric(wo, "µs/call-without")
	b.ReportMetric(w/wo, "time-ratio")
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
		var p *partitioned.Limiter[string]
		run(b, func() {
			p, _ = partitioned.New(partitioned.Config[string]{
				Key:         func(s string) string { return s },
				New:         f.ForKey,
				IdleTimeout: time.Hour, MaxPartitions: 2 * keys,
			})
			for _, k := range names {
				p.Acquire(ctx, k, 1)
			}
		}, func(k string) { p.Acquire(ctx, k, 1) })
		p.Close()
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
