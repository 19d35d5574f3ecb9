package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/redis/hotkey"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// hotKeyModes are the limiters of BenchmarkHotKey on one key of a token
// bucket of rate r and burst: limitkit's leases (redis/hotkey), its exact
// limiter (package redis), and go-redis/redis_rate (GCRA, exact). Each
// makes one "process": a limiter on a client of its own.
var hotKeyModes = []struct {
	name string
	make func(c *goredis.Client, key string, r float64, burst int) func(context.Context) (bool, error)
}{
	{"hotkey", func(c *goredis.Client, key string, r float64, burst int) func(context.Context) (bool, error) {
		l, err := hotkey.New(c, key, tokenbucket.Config{Rate: rate.Limit(r), Burst: burst})
		if err != nil {
			panic(err)
		}
		return grantOf(l)
	}},
	{"exact", func(c *goredis.Client, key string, r float64, burst int) func(context.Context) (bool, error) {
		l, err := redis.New(c, key, tokenbucket.Config{Rate: rate.Limit(r), Burst: burst})
		if err != nil {
			panic(err)
		}
		return grantOf(l)
	}},
	{"redis_rate", func(c *goredis.Client, key string, r float64, burst int) func(context.Context) (bool, error) {
		l := redis_rate.NewLimiter(c)
		// redis_rate counts in whole requests per period: r per second.
		lim := redis_rate.Limit{Rate: int(r), Burst: burst, Period: time.Second}
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, key, lim)
			return err == nil && res.Allowed > 0, err
		}
	}},
}

func grantOf(l ratelimit.Limiter) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		lease, err := l.Acquire(ctx, 1)
		return lease.Acquired(), err
	}
}

// hotKeyRound runs 3 clients of 32 goroutines each on one key of mode for
// d, each goroutine offering every (0: as fast as it can), and returns the
// decisions and the grants.
func hotKeyRound(b *testing.B, addr, key string, mode int, r float64, burst int, every, d time.Duration) (decisions, grants int64) {
	var wg sync.WaitGroup
	var n, ok atomic.Int64
	start := time.Now()
	stop := start.Add(d)
	for p := 0; p < 3; p++ {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
		defer c.Close()
		acquire := hotKeyModes[mode].make(c, key, r, burst)
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				next := start.Add(time.Duration(g) * every / 32)
				for {
					now := time.Now()
					if !now.Before(stop) {
						return
					}
					if every > 0 {
						if w := next.Sub(now); w > 0 {
							time.Sleep(w)
						}
						next = next.Add(every)
					}
					granted, err := acquire(context.Background())
					if err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
					if granted {
						ok.Add(1)
					}
				}
			}(g)
		}
	}
	wg.Wait()
	return n.Load(), ok.Load()
}

// BenchmarkHotKey: one token bucket key shared by 3 clients of 32
// goroutines each (goroutines of one process standing for 3 processes;
// redis/hotkey's BenchmarkOneKey runs 3 OS processes), on one
// redis-server, for limitkit's leases (redis/hotkey), its exact limiter and
// go-redis/redis_rate, taking turns in each round:
//
//   - under: a bucket of 1e9/s that never refuses, the goroutines as fast as
//     they can for 1s: decisions per second;
//   - over: 10,000/s with a burst of 1,000, offered 20,000/s (each
//     goroutine paced) for 2s: admitted over what the bucket allows in the
//     run (rate x 2s + burst).
//
// Run with -benchtime=1x -count=3 (each iteration is one round of each).
func BenchmarkHotKey(b *testing.B) {
	addr := redistest.Start(b).Addr
	var under [3]float64
	var over [3]float64
	rounds := 0
	for b.Loop() {
		for m := range hotKeyModes {
			d, _ := hotKeyRound(b, addr, hotKeyModes[m].name+"-under", m, 1e9, 1e9, 0, time.Second)
			under[m] += float64(d)
		}
		for m := range hotKeyModes {
			key := hotKeyModes[m].name + "-over-" + time.Now().Format("150405.000")
			_, g := hotKeyRound(b, addr, key, m, 10_000, 1000, 96*time.Second/20_000, 2*time.Second)
			over[m] += float64(g) / (10_000*2 + 1000)
		}
		rounds++
	}
	for m, mode := range hotKeyModes {
		b.ReportMetric(under[m]/float64(rounds), "decisions/s-"+mode.name)
		b.ReportMetric(over[m]/float64(rounds), "admitted/limit-"+mode.name)
	}
	b.ReportMetric(under[0]/under[1], "hotkey/exact")
	b.ReportMetric(under[0]/under[2], "hotkey/redis_rate")
}
