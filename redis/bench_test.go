package redis_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

var benchConfigs = []struct {
	name string
	cfg  ratelimit.Config
}{
	{"tokenbucket", tokenbucket.Config{Rate: 1e9, Burst: 1 << 40}},
	{"fixedwindow", fixedwindow.Config{Limit: 1 << 40, Window: time.Second}},
	{"slidingwindow-segmented", slidingwindow.Config{Limit: 1 << 40, Window: time.Second, Segments: 10}},
	{"slidingwindow-weighted", slidingwindow.Config{Limit: 1 << 40, Window: time.Second}},
	{"slidinglog", slidinglog.Config{Limit: 1 << 40, Window: 10 * time.Millisecond}},
	{"concurrency", concurrency.Config{Limit: 1 << 40}},
}

// Measure runs n goroutines calling op until b.N calls are done and reports
// decisions/s and the p50 and p99 latencies. The bench module uses the same
// loop for peers.
func Measure(b *testing.B, goroutines int, op func() error) {
	var mu sync.Mutex
	var lat []time.Duration
	next := make(chan struct{}, b.N)
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/goroutines+1)
			for range next {
				t0 := time.Now()
				if err := op(); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkAcquire: decisions per second against a redis-server started for
// the benchmark, at 1 and 64 goroutines.
func BenchmarkAcquire(b *testing.B) {
	addr := redistest.Start(b).Addr
	for _, c := range benchConfigs {
		for _, g := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", c.name, g), func(b *testing.B) {
				client := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
				defer client.Close()
				l, err := redis.New(client, "bench", c.cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				ctx := context.Background()
				Measure(b, g, func() error {
					lease, err := l.Acquire(ctx, 1)
					lease.Release()
					return err
				})
			})
		}
	}
}

// memConfigs keep their keys for an hour after one grant.
var memConfigs = []struct {
	name string
	cfg  ratelimit.Config
}{
	{"tokenbucket", tokenbucket.Config{Rate: 0.001, Burst: 10}},
	{"fixedwindow", fixedwindow.Config{Limit: 10, Window: time.Hour}},
	{"slidingwindow-segmented", slidingwindow.Config{Limit: 10, Window: time.Hour, Segments: 10}},
	{"slidingwindow-weighted", slidingwindow.Config{Limit: 10, Window: time.Hour}},
	{"slidinglog", slidinglog.Config{Limit: 10, Window: time.Hour}},
	{"concurrency", concurrency.Config{Limit: 10}},
}

// BenchmarkMemoryPerKey: INFO used_memory growth per key over 100,000 keys
// named with 17 bytes before the algorithm's suffix ("rl:{k00000000001}"),
// one grant each, on a fresh server.
func BenchmarkMemoryPerKey(b *testing.B) {
	const keys = 100_000
	for _, c := range memConfigs {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				srv := redistest.Start(b)
				client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64})
				ctx := context.Background()
				before, err := redistest.UsedMemory(ctx, client)
				if err != nil {
					b.Fatal(err)
				}
				limiters := make([]*redis.Limiter, keys)
				var wg sync.WaitGroup
				for g := 0; g < 64; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						for k := g; k < keys; k += 64 {
							limiters[k], _ = redis.New(client, fmt.Sprintf("k%011d", k), c.cfg, redis.WithPrefix("rl:"))
							if _, err := limiters[k].Acquire(ctx, 1); err != nil {
								b.Error(err)
								return
							}
						}
					}(g)
				}
				wg.Wait()
				after, _ := redistest.UsedMemory(ctx, client)
				b.ReportMetric(float64(after-before)/keys, "B/key")
				for _, l := range limiters {
					l.Close()
				}
				client.Close()
				srv.Stop()
			}
		})
	}
}
