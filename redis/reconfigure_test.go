package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// reconfigureOn runs the reconfiguration checks on client c.
func reconfigureOn(t *testing.T, c goredis.UniversalClient) {
	key := func(name string) string { return fmt.Sprintf("%s-%d", name, keySeq.Add(1)) }
	acquire := func(l *redis.Limiter, p int) ratelimit.Lease {
		t.Helper()
		lease, err := l.Acquire(bg, p)
		if err != nil {
			t.Fatalf("Acquire(%d): %v", p, err)
		}
		return lease
	}
	t.Run("window count held against the new limit", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		l := mustNew(t, c, key("rc-fw"), fixedwindow.Config{Limit: 10, Window: time.Hour}, redis.WithClock(clock))
		acquire(l, 8)
		if err := l.Reconfigure(fixedwindow.Config{Limit: 5, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if g := acquire(l, 1); g.Acquired() || g.Limit() != 5 {
			t.Fatalf("8 used of a new limit of 5: %v, want refused, limit 5", g)
		}
		if err := l.Reconfigure(fixedwindow.Config{Limit: 20, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if g := acquire(l, 12); !g.Acquired() || g.Remaining() != 0 {
			t.Fatalf("8 used of a new limit of 20: %v, want 12 granted, none left", g)
		}
	})
	t.Run("token bucket clamped to the new burst", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		l := mustNew(t, c, key("rc-tb"), tokenbucket.Config{Rate: 1e-6, Burst: 10}, redis.WithClock(clock))
		acquire(l, 2)
		if err := l.Reconfigure(tokenbucket.Config{Rate: 1e-6, Burst: 3}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Microsecond) // the next refill clamps
		if g := acquire(l, 3); !g.Acquired() {
			t.Fatalf("Acquire(3) with a burst of 3: %v", g)
		}
		if g := acquire(l, 1); g.Acquired() {
			t.Fatalf("a fourth token after clamping to 3: %v", g)
		}
	})
	t.Run("a Factory's limiters share their configuration", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		f, err := redis.NewFactory(c, slidinglog.Config{Limit: 4, Window: time.Hour}, redis.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := f.New(key("rc-f-a"))
		defer a.Close()
		acquire(a, 3)
		if err := f.Reconfigure(slidinglog.Config{Limit: 2, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if g := acquire(a, 1); g.Acquired() {
			t.Fatalf("3 used of a new limit of 2: %v", g)
		}
		b, _ := f.New(key("rc-f-b"))
		defer b.Close()
		if g := acquire(b, 2); !g.Acquired() || g.Limit() != 2 {
			t.Fatalf("a new limiter: %v, want 2 of 2", g)
		}
	})
	t.Run("layouts that cannot change are refused and change nothing", func(t *testing.T) {
		l := mustNew(t, c, key("rc-bad"), slidingwindow.Config{Limit: 3, Window: time.Second, Segments: 4})
		for _, cfg := range []ratelimit.Config{
			slidingwindow.Config{Limit: 3, Window: 2 * time.Second, Segments: 4},
			slidingwindow.Config{Limit: 3, Window: time.Second},
			slidingwindow.Config{Limit: 0, Window: time.Second, Segments: 4},
			fixedwindow.Config{Limit: 3, Window: time.Second},
			nil,
		} {
			if err := l.Reconfigure(cfg); !errors.Is(err, ratelimit.ErrInvalidConfig) {
				t.Errorf("Reconfigure(%#v): %v, want ErrInvalidConfig", cfg, err)
			}
		}
		if g := acquire(l, 3); !g.Acquired() || g.Limit() != 3 {
			t.Fatalf("after refused changes: %v, want 3 of 3", g)
		}
		tb := mustNew(t, c, key("rc-bad-tb"), tokenbucket.Config{Rate: 1, Burst: 3})
		if err := tb.Reconfigure(tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 3}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("continuous to interval refill: %v", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		l := mustNew(t, c, key("rc-reset"), tokenbucket.Config{Rate: 1e-6, Burst: 4}, redis.WithClock(clock))
		acquire(l, 4)
		if g := acquire(l, 1); g.Acquired() {
			t.Fatalf("a fifth token: %v", g)
		}
		if err := l.Reset(bg); err != nil {
			t.Fatal(err)
		}
		if g := acquire(l, 4); !g.Acquired() {
			t.Fatalf("after Reset: %v, want the full burst", g)
		}
		cc := mustNew(t, c, key("rc-reset-cc"), concurrency.Config{Limit: 1})
		held := acquire(cc, 1)
		if err := cc.Reset(bg); err != nil {
			t.Fatal(err)
		}
		if g := acquire(cc, 1); g.Acquired() {
			t.Fatalf("concurrency after Reset: %v, want refused (the holder keeps its permit)", g)
		}
		held.Release()
		cc.Close()
		if err := cc.Reset(bg); !errors.Is(err, ratelimit.ErrClosed) {
			t.Fatalf("Reset after Close: %v", err)
		}
	})
}

func TestReconfigureMiniredis(t *testing.T) {
	_, c := miniClient(t)
	reconfigureOn(t, c)
}

func TestReconfigureRealRedis(t *testing.T) {
	reconfigureOn(t, realClient(t))
}
