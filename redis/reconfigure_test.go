package redis_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

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

// key returns a key no other test uses: name and a sequence number.
func key(name string) string { return fmt.Sprintf("%s-%d", name, keySeq.Add(1)) }

// acquire takes p permits from l now, and fails the test on an error.
func acquire(t *testing.T, l *redis.Limiter, p int) ratelimit.Lease {
	t.Helper()
	lease, err := l.Acquire(bg, p)
	if err != nil {
		t.Fatalf("Acquire(%d): %v", p, err)
	}
	return lease
}

// reconfigureOn runs the reconfiguration checks on client c.
func reconfigureOn(t *testing.T, c goredis.UniversalClient) {
	t.Run("window count held against the new limit", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		l := mustNew(t, c, key("rc-fw"), fixedwindow.Config{Limit: 10, Window: time.Hour}, redis.WithClock(clock))
		acquire(t, l, 8)
		if err := l.Reconfigure(fixedwindow.Config{Limit: 5, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if g := acquire(t, l, 1); g.Acquired() || g.Limit() != 5 {
			t.Fatalf("8 used of a new limit of 5: %v, want refused, limit 5", g)
		}
		if err := l.Reconfigure(fixedwindow.Config{Limit: 20, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		// The refusal of 1 just made is not remembered past the change.
		if g := acquire(t, l, 1); !g.Acquired() {
			t.Fatalf("8 used of a new limit of 20: Acquire(1) %v, want granted", g)
		}
		if g := acquire(t, l, 11); !g.Acquired() || g.Remaining() != 0 {
			t.Fatalf("9 used of a new limit of 20: %v, want 11 granted, none left", g)
		}
	})
	t.Run("token bucket clamped to the new burst", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		l := mustNew(t, c, key("rc-tb"), tokenbucket.Config{Rate: 1e-6, Burst: 10}, redis.WithClock(clock))
		acquire(t, l, 2)
		if err := l.Reconfigure(tokenbucket.Config{Rate: 1e-6, Burst: 3}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Microsecond) // the next refill clamps
		if g := acquire(t, l, 3); !g.Acquired() {
			t.Fatalf("Acquire(3) with a burst of 3: %v", g)
		}
		if g := acquire(t, l, 1); g.Acquired() {
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
		acquire(t, a, 3)
		if err := f.Reconfigure(slidinglog.Config{Limit: 2, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if g := acquire(t, a, 1); g.Acquired() {
			t.Fatalf("3 used of a new limit of 2: %v", g)
		}
		b, _ := f.New(key("rc-f-b"))
		defer b.Close()
		if g := acquire(t, b, 2); !g.Acquired() || g.Limit() != 2 {
			t.Fatalf("a new limiter: %v, want 2 of 2", g)
		}
	})
	t.Run("another algorithm is refused and changes nothing", func(t *testing.T) {
		l := mustNew(t, c, key("rc-bad"), slidingwindow.Config{Limit: 3, Window: time.Second, Segments: 4})
		for _, cfg := range []ratelimit.Config{
			slidingwindow.Config{Limit: 0, Window: time.Second, Segments: 4},
			fixedwindow.Config{Limit: 3, Window: time.Second},
			nil,
		} {
			if err := l.Reconfigure(cfg); !errors.Is(err, ratelimit.ErrInvalidConfig) {
				t.Errorf("Reconfigure(%#v): %v, want ErrInvalidConfig", cfg, err)
			}
		}
		if g := acquire(t, l, 3); !g.Acquired() || g.Limit() != 3 {
			t.Fatalf("after refused changes: %v, want 3 of 3", g)
		}
	})
	reconfigureLayouts(t, c)
	reconfigureForms(t, c)
	t.Run("reset", func(t *testing.T) {
		clock := ratelimittest.NewClock()
		l := mustNew(t, c, key("rc-reset"), tokenbucket.Config{Rate: 1e-6, Burst: 4}, redis.WithClock(clock))
		acquire(t, l, 4)
		if g := acquire(t, l, 1); g.Acquired() {
			t.Fatalf("a fifth token: %v", g)
		}
		if err := l.Reset(bg); err != nil {
			t.Fatal(err)
		}
		if g := acquire(t, l, 4); !g.Acquired() {
			t.Fatalf("after Reset: %v, want the full burst", g)
		}
		cc := mustNew(t, c, key("rc-reset-cc"), concurrency.Config{Limit: 1})
		held := acquire(t, cc, 1)
		if err := cc.Reset(bg); err != nil {
			t.Fatal(err)
		}
		after := acquire(t, cc, 1)
		if !after.Acquired() {
			t.Fatalf("concurrency after Reset: %v, want granted (nothing held)", after)
		}
		held.Release() // held before the Reset: gives nothing back
		if g := acquire(t, cc, 1); g.Acquired() {
			t.Fatalf("a lease from before the Reset released: %v, want refused (1 held of 1)", g)
		}
		after.Release()
		if g := acquire(t, cc, 1); !g.Acquired() {
			t.Fatalf("after the release: %v, want granted", g)
		} else {
			g.Release()
		}
		cc.Close()
		if err := cc.Reset(bg); !errors.Is(err, ratelimit.ErrClosed) {
			t.Fatalf("Reset after Close: %v", err)
		}
	})
}

func TestReconfigureMiniredis(t *testing.T) {
	t.Parallel() // in-process Lua: beside the other miniredis tests
	_, c := miniClient(t)
	reconfigureOn(t, c)
}

func TestReconfigureRealRedis(t *testing.T) {
	reconfigureOn(t, realClient(t))
}

// alignedClock is a fake clock at a whole day since the Unix epoch, so
// that every window and period of the tests starts at it.
func alignedClock() *ratelimittest.Clock {
	const day = int64(24 * time.Hour / time.Microsecond)
	return ratelimittest.NewClockAt(time.UnixMicro((ratelimittest.Start.UnixMicro()/day + 2) * day))
}

// reconfigureLayouts checks, on client c, that a change of a window's
// length or segments, or of a bucket's refill mode or period, carries the
// state over by the algorithm's rule.
func reconfigureLayouts(t *testing.T, c goredis.UniversalClient) {
	type step struct {
		at      time.Duration // since the aligned start
		cfg     ratelimit.Config
		acquire int // permits; -1: none (a status check of Remaining only)
		granted bool
		left    int64 // Remaining after it
	}
	run := func(t *testing.T, name string, cfg ratelimit.Config, steps []step) {
		t.Helper()
		clock := alignedClock()
		t0 := clock.Now()
		l := mustNew(t, c, key(name), cfg, redis.WithClock(clock))
		for i, s := range steps {
			clock.Set(t0.Add(s.at))
			if s.cfg != nil {
				if err := l.Reconfigure(s.cfg); err != nil {
					t.Fatalf("step %d: Reconfigure(%#v): %v", i, s.cfg, err)
				}
			}
			p := max(s.acquire, 0)
			g, err := l.Acquire(bg, p)
			if err != nil {
				t.Fatalf("step %d: Acquire(%d): %v", i, p, err)
			}
			if s.acquire >= 0 && g.Acquired() != s.granted || g.Remaining() != s.left {
				t.Fatalf("step %d at +%v: Acquire(%d) = %v, want granted %v with %d left", i, s.at, p, g, s.granted, s.left)
			}
		}
	}
	const none = -1
	t.Run("fixed window 1h to 1m: the hour's count is held in now's minute", func(t *testing.T) {
		run(t, "rl-fw-h-m", fixedwindow.Config{Limit: 10, Window: time.Hour}, []step{
			{at: 30 * time.Minute, acquire: 8, granted: true, left: 2},
			{at: 30*time.Minute + time.Second, cfg: fixedwindow.Config{Limit: 10, Window: time.Minute}, acquire: 3, granted: false, left: 2},
			{at: 30*time.Minute + 2*time.Second, acquire: 2, granted: true, left: 0},
			{at: 31*time.Minute - time.Microsecond, acquire: 1, granted: false, left: 0},
			{at: 31 * time.Minute, acquire: none, left: 10},
		})
	})
	t.Run("fixed window 1m to 1h: the minute's count is held in now's hour", func(t *testing.T) {
		run(t, "rl-fw-m-h", fixedwindow.Config{Limit: 10, Window: time.Minute}, []step{
			{at: 30 * time.Second, acquire: 10, granted: true, left: 0},
			// A refusal stores the moved count: it stays when the minute ends.
			{at: 40 * time.Second, cfg: fixedwindow.Config{Limit: 12, Window: time.Hour}, acquire: 3, granted: false, left: 2},
			{at: 5 * time.Minute, acquire: 3, granted: false, left: 2},
			{at: 59 * time.Minute, acquire: 2, granted: true, left: 0},
			{at: time.Hour, acquire: none, left: 12},
		})
		// A minute that ended before the change carries nothing.
		run(t, "rl-fw-m-h-ended", fixedwindow.Config{Limit: 10, Window: time.Minute}, []step{
			{at: 30 * time.Second, acquire: 8, granted: true, left: 2},
			{at: 60 * time.Second, cfg: fixedwindow.Config{Limit: 10, Window: time.Hour}, acquire: none, left: 10},
		})
	})
	t.Run("weighted window 10s to 4s: the old estimate, rounded up, is now's count", func(t *testing.T) {
		// At +12s the 10s window estimates 6 x 8/10 = 4.8 permits: 5 are
		// held in the 4s window [12s, 16s), which weighs them in [16s, 20s).
		run(t, "rl-sw", slidingwindow.Config{Limit: 10, Window: 10 * time.Second}, []step{
			{at: time.Second, acquire: 6, granted: true, left: 4},
			{at: 12 * time.Second, cfg: slidingwindow.Config{Limit: 10, Window: 4 * time.Second}, acquire: 6, granted: false, left: 5},
			{at: 13 * time.Second, acquire: 5, granted: true, left: 0},
			{at: 18 * time.Second, acquire: none, left: 5},
			{at: 20 * time.Second, acquire: none, left: 10},
		})
		// Back to 10s at +18s: 10 x 2/4 = 5 in [10s, 20s).
		run(t, "rl-sw-back", slidingwindow.Config{Limit: 10, Window: 4 * time.Second}, []step{
			{at: 13 * time.Second, acquire: 10, granted: true, left: 0},
			{at: 18 * time.Second, cfg: slidingwindow.Config{Limit: 10, Window: 10 * time.Second}, acquire: 6, granted: false, left: 5},
			{at: 25 * time.Second, acquire: none, left: 7}, // 5 x 5/10 weighed
			{at: 30 * time.Second, acquire: none, left: 10},
		})
	})
	t.Run("token bucket continuous to interval: tokens kept, no refill before the change", func(t *testing.T) {
		run(t, "rl-tb-c-i", tokenbucket.Config{Rate: 1, Burst: 10}, []step{
			{at: 0, acquire: 7, granted: true, left: 3},
			// 2.5s would refill 2.5 tokens under the old rate: not counted.
			{at: 2500 * time.Millisecond, cfg: tokenbucket.Config{Period: time.Second, PerPeriod: 2, Burst: 10}, acquire: 4, granted: false, left: 3},
			{at: 3*time.Second - time.Microsecond, acquire: none, left: 3},
			{at: 3 * time.Second, acquire: 5, granted: true, left: 0},
		})
		run(t, "rl-tb-c-i-clamp", tokenbucket.Config{Rate: 1, Burst: 10}, []step{
			{at: 0, acquire: 5, granted: true, left: 5},
			{at: time.Second, cfg: tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 2}, acquire: none, left: 2},
		})
	})
	t.Run("token bucket interval period change: the refill clock restarts at now's period", func(t *testing.T) {
		run(t, "rl-tb-p", tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 5}, []step{
			{at: 0, acquire: 5, granted: true, left: 0},
			{at: 3 * time.Second, cfg: tokenbucket.Config{Period: 10 * time.Second, PerPeriod: 5, Burst: 5}, acquire: 1, granted: false, left: 0},
			{at: 10*time.Second - time.Microsecond, acquire: none, left: 0},
			{at: 10 * time.Second, acquire: 5, granted: true, left: 0},
		})
		run(t, "rl-tb-i-c", tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 5}, []step{
			{at: 0, acquire: 5, granted: true, left: 0},
			{at: 1500 * time.Millisecond, cfg: tokenbucket.Config{Rate: 2, Burst: 5}, acquire: none, left: 0},
			{at: 2 * time.Second, acquire: 1, granted: true, left: 0},
		})
	})
	t.Run("segmented window: a change of segment length holds the window in now's segment", func(t *testing.T) {
		// Entries at 0s (3) and 5s (2) of 1s segments; at 9.5s the 2s
		// segments hold both in [8s, 10s), until 8s + 4s.
		run(t, "rl-sg", slidingwindow.Config{Limit: 6, Window: 10 * time.Second, Segments: 10}, []step{
			{at: 500 * time.Millisecond, acquire: 3, granted: true, left: 3},
			{at: 5500 * time.Millisecond, acquire: 2, granted: true, left: 1},
			{at: 9500 * time.Millisecond, cfg: slidingwindow.Config{Limit: 6, Window: 4 * time.Second, Segments: 2}, acquire: 2, granted: false, left: 1},
			{at: 12*time.Second - time.Microsecond, acquire: none, left: 1},
			{at: 12 * time.Second, acquire: none, left: 6},
		})
	})
	t.Run("segmented window: with the same segment length the entries stay, and leave at instant + the new Window", func(t *testing.T) {
		// Already safe: an entry's instant is its segment's start under
		// either config, which is where the new one would count the grant.
		run(t, "rl-sg-w", slidingwindow.Config{Limit: 6, Window: 10 * time.Second, Segments: 10}, []step{
			{at: 500 * time.Millisecond, acquire: 3, granted: true, left: 3},
			{at: 5500 * time.Millisecond, acquire: 2, granted: true, left: 1},
			{at: 9500 * time.Millisecond, cfg: slidingwindow.Config{Limit: 6, Window: 5 * time.Second, Segments: 5}, acquire: none, left: 4},
			{at: 10*time.Second - time.Microsecond, acquire: 5, granted: false, left: 4},
			{at: 10 * time.Second, acquire: none, left: 6},
		})
	})
	t.Run("sliding log: the entries stay, and leave at instant + the new Window", func(t *testing.T) {
		// Already safe: a grant at an instant leaves the new window then,
		// as if it had been made under the new config.
		run(t, "rl-sl-shrink", slidinglog.Config{Limit: 6, Window: 10 * time.Second}, []step{
			{at: time.Second, acquire: 3, granted: true, left: 3},
			{at: 6 * time.Second, acquire: 2, granted: true, left: 1},
			{at: 8 * time.Second, cfg: slidinglog.Config{Limit: 6, Window: 4 * time.Second}, acquire: none, left: 4},
			{at: 10*time.Second - time.Microsecond, acquire: none, left: 4},
			{at: 10 * time.Second, acquire: none, left: 6},
		})
		run(t, "rl-sl-grow", slidinglog.Config{Limit: 6, Window: 10 * time.Second}, []step{
			{at: time.Second, acquire: 3, granted: true, left: 3},
			{at: 6 * time.Second, acquire: 2, granted: true, left: 1},
			{at: 8 * time.Second, cfg: slidinglog.Config{Limit: 6, Window: 20 * time.Second}, acquire: 2, granted: false, left: 1},
			{at: 21*time.Second - time.Microsecond, acquire: none, left: 1},
			{at: 21 * time.Second, acquire: none, left: 4},
			{at: 26 * time.Second, acquire: none, left: 6},
		})
	})
	t.Run("states written without their layout read under the current one", func(t *testing.T) {
		clock := alignedClock()
		t0 := clock.Now().UnixMicro()
		for _, tc := range []struct {
			cfg  ratelimit.Config
			keys map[string]string // suffix -> state
			at   time.Duration
			left int64
		}{
			{fixedwindow.Config{Limit: 10, Window: time.Minute}, map[string]string{":fw": fmt.Sprintf("%d 7", t0)}, 10 * time.Second, 3},
			{slidingwindow.Config{Limit: 10, Window: 10 * time.Second}, map[string]string{":sw": fmt.Sprintf("%d 5 2", t0)}, 5 * time.Second, 4},
			{tokenbucket.Config{Rate: 1e-6, Burst: 10}, map[string]string{":tb": fmt.Sprintf("4 %d 0", t0)}, 0, 4},
			{tokenbucket.Config{Period: time.Hour, PerPeriod: 1, Burst: 10}, map[string]string{":tb": fmt.Sprintf("4 %d", t0)}, time.Minute, 4},
		} {
			k := key("rl-old")
			for suffix, state := range tc.keys {
				if err := c.Set(bg, "ratelimit:{"+k+"}"+suffix, state, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			cl := ratelimittest.NewClockAt(time.UnixMicro(t0).Add(tc.at))
			l := mustNew(t, c, k, tc.cfg, redis.WithClock(cl))
			if g := acquire(t, l, 0); g.Remaining() != tc.left {
				t.Errorf("%#v on %v: %v, want %d left", tc.cfg, tc.keys, g, tc.left)
			}
		}
		k := key("rl-old-sg")
		if err := c.RPush(bg, "ratelimit:{"+k+"}:sgc", fmt.Sprintf("%d 3", t0)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(bg, "ratelimit:{"+k+"}:sgc:m", fmt.Sprintf("0 %d", t0), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		cl := ratelimittest.NewClockAt(time.UnixMicro(t0).Add(time.Second))
		l := mustNew(t, c, k, slidingwindow.Config{Limit: 10, Window: 10 * time.Second, Segments: 10}, redis.WithClock(cl))
		if g := acquire(t, l, 1); !g.Acquired() || g.Remaining() != 6 {
			t.Errorf("segmented, 3 in an entry at the start: %v, want 1 granted, 6 left", g)
		}
	})
	reconfigureBounds(t, c)
}

// grant is a grant the bound checks replay: its instant (us since the
// epoch) and permits.
type grant struct{ at, p int64 }

// floorUS is the start of the period p (us) that holds t.
func floorUS(t, p int64) int64 { return t - ((t%p)+p)%p }

// reconfigureBounds drives limiters with random requests on a fake clock
// across a change of window length, segments or refill, and checks that
// before the change nothing beyond the old limit is admitted, and after
// it the new configuration's windows (or bucket) admit no more than the
// new limit, counting the grants carried over.
func reconfigureBounds(t *testing.T, c goredis.UniversalClient) {
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	type bound func(t *testing.T, grants []grant, change int64)
	sum := func(grants []grant, in func(g grant) bool) int64 {
		var n int64
		for _, g := range grants {
			if in(g) {
				n += g.p
			}
		}
		return n
	}
	// Every aligned window of length w among the grants in [from, to)
	// holds at most limit.
	windows := func(t *testing.T, what string, grants []grant, from, to, w, limit int64) {
		t.Helper()
		per := map[int64]int64{}
		for _, g := range grants {
			if g.at >= from && g.at < to {
				per[floorUS(g.at, w)] += g.p
			}
		}
		for s, n := range per {
			if n > limit {
				t.Errorf("%s: %d granted in the window at %d, limit %d", what, n, s, limit)
			}
		}
	}
	fixed := func(o, n fixedwindow.Config) bound {
		return func(t *testing.T, grants []grant, ch int64) {
			wo, wn := us(o.Window), us(n.Window)
			windows(t, "old", grants, 0, ch, wo, int64(o.Limit))
			carried := sum(grants, func(g grant) bool { return g.at < ch && floorUS(g.at, wo) == floorUS(ch, wo) })
			end := floorUS(ch, wn) + wn
			if got := sum(grants, func(g grant) bool { return g.at >= ch && g.at < end }); got > max(0, int64(n.Limit)-carried) {
				t.Errorf("%d granted in the new window of the change, with %d carried, limit %d", got, carried, int64(n.Limit))
			}
			windows(t, "new", grants, end, 1<<62, wn, int64(n.Limit))
		}
	}
	weighted := func(o, n slidingwindow.Config) bound {
		return func(t *testing.T, grants []grant, ch int64) {
			wo, wn := us(o.Window), us(n.Window)
			windows(t, "old", grants, 0, ch, wo, int64(o.Limit))
			cur := floorUS(ch, wo)
			total := sum(grants, func(g grant) bool { return g.at < ch && floorUS(g.at, wo) == cur })
			prev := sum(grants, func(g grant) bool { return g.at < ch && floorUS(g.at, wo) == cur-wo })
			est := float64(prev)*float64((wo-(ch-cur))*1000)/float64(wo*1000) + float64(total)
			carried := int64(math.Ceil(est))
			end := floorUS(ch, wn) + wn
			if got := sum(grants, func(g grant) bool { return g.at >= ch && g.at < end }); got > max(0, int64(n.Limit)-carried) {
				t.Errorf("%d granted in the new window of the change, with %d carried (%v estimated), limit %d", got, carried, est, int64(n.Limit))
			}
			windows(t, "new", grants, end, 1<<62, wn, int64(n.Limit))
		}
	}
	// Segmented and log: at every grant, the permits in the window that
	// ends with it, as the config in force counts them, of the grants made
	// since the change or carried (in the old window at the change).
	logs := func(wo, wn, so, sn, lo, ln int64) bound {
		return func(t *testing.T, grants []grant, ch int64) {
			carried := sum(grants, func(g grant) bool { return g.at < ch && floorUS(g.at, so)+wo > ch })
			relaid := so != sn
			for _, x := range grants {
				if x.at < ch {
					if n := sum(grants, func(g grant) bool { return g.at <= x.at && floorUS(g.at, so)+wo > x.at }); n > lo {
						t.Errorf("old: %d in the window at %d, limit %d", n, x.at, lo)
					}
					continue
				}
				var n int64
				if relaid {
					n = sum(grants, func(g grant) bool { return g.at >= ch && g.at <= x.at && floorUS(g.at, sn)+wn > x.at })
					if floorUS(ch, sn)+wn > x.at {
						n += carried
					}
					if n > max(ln, carried) {
						t.Errorf("new: %d in the window at %d with %d carried, limit %d", n, x.at, carried, ln)
					}
				} else if n = sum(grants, func(g grant) bool {
					return g.at <= x.at && floorUS(g.at, sn)+wn > x.at && (g.at >= ch || floorUS(g.at, so)+wo > ch)
				}); n > ln {
					t.Errorf("new: %d in the window at %d, limit %d", n, x.at, ln)
				}
			}
		}
	}
	// A bucket of the new config, starting at the change with what the old
	// one held then (clamped to the new burst), never goes into debt.
	type sim struct {
		rate   float64
		period int64
		per    int64
		burst  float64
		tokens float64
		last   int64
	}
	refill := func(b *sim, t int64) {
		if b.period > 0 {
			b.tokens = min(b.burst, b.tokens+float64((floorUS(t, b.period)-floorUS(b.last, b.period))/b.period*b.per))
		} else {
			b.tokens = min(b.burst, b.tokens+float64(t-b.last)/1e6*b.rate)
		}
		b.last = t
	}
	simOf := func(cfg tokenbucket.Config, start int64) *sim {
		return &sim{rate: float64(cfg.Rate), period: us(cfg.Period), per: int64(cfg.PerPeriod), burst: float64(cfg.Burst), tokens: float64(cfg.Burst), last: start}
	}
	bucket := func(o, n tokenbucket.Config) bound {
		return func(t *testing.T, grants []grant, ch int64) {
			b := simOf(o, grants[0].at)
			check := func(what string, g grant) {
				refill(b, g.at)
				if b.tokens -= float64(g.p); b.tokens < -1e-9 {
					t.Errorf("%s: %d granted at %d, beyond the bucket (%v after)", what, g.p, g.at, b.tokens)
				}
			}
			i := 0
			for ; i < len(grants) && grants[i].at < ch; i++ {
				check("old", grants[i])
			}
			refill(b, ch)
			nb := simOf(n, ch)
			nb.tokens = min(b.tokens, nb.burst)
			b = nb
			for ; i < len(grants); i++ {
				check("new", grants[i])
			}
		}
	}
	for _, tc := range []struct {
		name     string
		old, new ratelimit.Config
		step     time.Duration // the most between two requests
		check    bound
	}{
		{"fixed window 1h to 1m", fixedwindow.Config{Limit: 20, Window: time.Hour}, fixedwindow.Config{Limit: 5, Window: time.Minute}, 3 * time.Minute,
			fixed(fixedwindow.Config{Limit: 20, Window: time.Hour}, fixedwindow.Config{Limit: 5, Window: time.Minute})},
		{"fixed window 1m to 1h", fixedwindow.Config{Limit: 5, Window: time.Minute}, fixedwindow.Config{Limit: 20, Window: time.Hour}, 20 * time.Second,
			fixed(fixedwindow.Config{Limit: 5, Window: time.Minute}, fixedwindow.Config{Limit: 20, Window: time.Hour})},
		{"weighted window 10s to 4s", slidingwindow.Config{Limit: 12, Window: 10 * time.Second}, slidingwindow.Config{Limit: 6, Window: 4 * time.Second}, time.Second,
			weighted(slidingwindow.Config{Limit: 12, Window: 10 * time.Second}, slidingwindow.Config{Limit: 6, Window: 4 * time.Second})},
		{"weighted window 4s to 10s", slidingwindow.Config{Limit: 6, Window: 4 * time.Second}, slidingwindow.Config{Limit: 12, Window: 10 * time.Second}, time.Second,
			weighted(slidingwindow.Config{Limit: 6, Window: 4 * time.Second}, slidingwindow.Config{Limit: 12, Window: 10 * time.Second})},
		{"segmented 10s/10 to 4s/2", slidingwindow.Config{Limit: 10, Window: 10 * time.Second, Segments: 10}, slidingwindow.Config{Limit: 6, Window: 4 * time.Second, Segments: 2}, time.Second,
			logs(us(10*time.Second), us(4*time.Second), us(time.Second), us(2*time.Second), 10, 6)},
		{"segmented 4s/4 to 12s/3", slidingwindow.Config{Limit: 6, Window: 4 * time.Second, Segments: 4}, slidingwindow.Config{Limit: 10, Window: 12 * time.Second, Segments: 3}, time.Second,
			logs(us(4*time.Second), us(12*time.Second), us(time.Second), us(4*time.Second), 6, 10)},
		{"segmented 10s/10 to 5s/5", slidingwindow.Config{Limit: 10, Window: 10 * time.Second, Segments: 10}, slidingwindow.Config{Limit: 6, Window: 5 * time.Second, Segments: 5}, time.Second,
			logs(us(10*time.Second), us(5*time.Second), us(time.Second), us(time.Second), 10, 6)},
		{"sliding log 10s to 4s", slidinglog.Config{Limit: 10, Window: 10 * time.Second}, slidinglog.Config{Limit: 6, Window: 4 * time.Second}, time.Second,
			logs(us(10*time.Second), us(4*time.Second), 1, 1, 10, 6)},
		{"sliding log 4s to 10s", slidinglog.Config{Limit: 6, Window: 4 * time.Second}, slidinglog.Config{Limit: 10, Window: 10 * time.Second}, time.Second,
			logs(us(4*time.Second), us(10*time.Second), 1, 1, 6, 10)},
		{"token bucket continuous to interval", tokenbucket.Config{Rate: 2, Burst: 10}, tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 6}, 700 * time.Millisecond,
			bucket(tokenbucket.Config{Rate: 2, Burst: 10}, tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 6})},
		{"token bucket interval to continuous", tokenbucket.Config{Period: time.Second, PerPeriod: 2, Burst: 6}, tokenbucket.Config{Rate: 3, Burst: 10}, 700 * time.Millisecond,
			bucket(tokenbucket.Config{Period: time.Second, PerPeriod: 2, Burst: 6}, tokenbucket.Config{Rate: 3, Burst: 10})},
		{"token bucket interval period 1s to 3s", tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 4}, tokenbucket.Config{Period: 3 * time.Second, PerPeriod: 5, Burst: 8}, 700 * time.Millisecond,
			bucket(tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 4}, tokenbucket.Config{Period: 3 * time.Second, PerPeriod: 5, Burst: 8})},
	} {
		t.Run("bound: "+tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 4; seed++ {
				rng := rand.New(rand.NewSource(seed))
				clock := alignedClock()
				clock.Advance(time.Duration(rng.Int63n(int64(tc.step))).Truncate(time.Millisecond))
				l := mustNew(t, c, key("rb"), tc.old, redis.WithClock(clock))
				var grants []grant
				var change int64
				for i := 0; i < 160; i++ {
					if i == 80 {
						if err := l.Reconfigure(tc.new); err != nil {
							t.Fatal(err)
						}
						change = clock.Now().UnixMicro()
					}
					p := rng.Intn(3) + 1
					g, err := l.Acquire(bg, p)
					if err != nil {
						t.Fatal(err)
					}
					if g.Acquired() {
						grants = append(grants, grant{clock.Now().UnixMicro(), int64(p)})
					}
					clock.Advance(time.Duration(rng.Int63n(int64(tc.step))).Truncate(time.Millisecond))
				}
				if len(grants) == 0 {
					t.Fatal("nothing granted")
				}
				tc.check(t, grants, change)
				if t.Failed() {
					t.Fatalf("seed %d", seed)
				}
			}
		})
	}
}

// reconfigureForms checks, on client c, that a sliding window switched
// between its weighted and segmented forms carries its count over as
// memory's does: a memory limiter given the same requests and changes at
// the same instants decides the same, and a switch back and forth counts
// nothing twice (the old form's keys are deleted).
func reconfigureForms(t *testing.T, c goredis.UniversalClient) {
	weighted := slidingwindow.Config{Limit: 10, Window: 10 * time.Second}
	segmented := slidingwindow.Config{Limit: 8, Window: 4 * time.Second, Segments: 4}
	long := slidingwindow.Config{Limit: 12, Window: 12 * time.Second, Segments: 3}
	for _, tc := range []struct {
		name string
		cfgs []ratelimit.Config
	}{
		{"weighted to segmented", []ratelimit.Config{weighted, segmented}},
		{"segmented to weighted", []ratelimit.Config{segmented, weighted}},
		{"back and forth", []ratelimit.Config{weighted, segmented, weighted, long, weighted, segmented}},
	} {
		t.Run("forms: "+tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 4; seed++ {
				rng := rand.New(rand.NewSource(seed))
				clock := alignedClock()
				clock.Advance(time.Duration(rng.Int63n(int64(time.Second))).Truncate(time.Millisecond))
				k := fmt.Sprintf("rf-%d", keySeq.Add(1))
				rl := mustNew(t, c, k, tc.cfgs[0], redis.WithClock(clock), redis.WithoutRefusalCache())
				ml, err := memory.New(tc.cfgs[0], memory.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				const per = 30 // requests per configuration
				carried := 0   // switches made with permits held
				for i := 0; i < per*len(tc.cfgs); i++ {
					if i > 0 && i%per == 0 {
						cfg := tc.cfgs[i/per]
						if err := rl.Reconfigure(cfg); err != nil {
							t.Fatalf("seed %d: redis Reconfigure(%#v): %v", seed, cfg, err)
						}
						if err := ml.Reconfigure(cfg); err != nil {
							t.Fatalf("seed %d: memory Reconfigure(%#v): %v", seed, cfg, err)
						}
						if g, err := ml.Acquire(bg, 0); err != nil {
							t.Fatal(err)
						} else if g.Remaining() < int64(cfg.(slidingwindow.Config).Limit) {
							carried++
						}
						// The old form's keys are gone once the new one decided.
						if _, err := rl.Acquire(bg, 0); err != nil {
							t.Fatal(err)
						}
						gone := []string{":sgc", ":sgc:m"}
						if cfg.(slidingwindow.Config).Segments > 0 {
							gone = []string{":sw"}
						}
						for _, g := range gone {
							if n, err := c.Exists(bg, "ratelimit:{"+k+"}"+g).Result(); err != nil || n != 0 {
								t.Fatalf("seed %d step %d: key %s after the switch to %#v: %d %v", seed, i, g, cfg, n, err)
							}
						}
					}
					p := rng.Intn(4)
					m, err1 := ml.Acquire(bg, p)
					r, err2 := rl.Acquire(bg, p)
					if err1 != nil || err2 != nil {
						t.Fatalf("seed %d step %d: errors %v, %v", seed, i, err1, err2)
					}
					if m.Acquired() != r.Acquired() || m.Remaining() != r.Remaining() {
						t.Fatalf("seed %d step %d at +%v (%d permits):\nmemory %v\nredis  %v", seed, i, clock.Now().Sub(alignedClock().Now()), p, m, r)
					}
					clock.Advance(time.Duration(rng.Int63n(int64(700 * time.Millisecond))).Truncate(time.Millisecond))
				}
				ml.Close()
				rl.Close()
				if carried == 0 {
					t.Fatalf("seed %d: no switch carried a count", seed)
				}
			}
		})
	}
}

// TestReconfigureKeepsDebtThroughInf: a token bucket reconfigured to
// rate.Inf and back keeps its debt to a reservation asleep meanwhile (no
// script runs under rate.Inf: the state stays as it was), as in memory.
// Burst 5 and 5s at 1/s allow 10 in 5s. Meanwhile rate.Inf grants
// everything.
func TestReconfigureKeepsDebtThroughInf(t *testing.T) {
	_, c := miniClient(t)
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 1, Burst: 5}
	l := mustNew(t, c, "debt-inf", cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
	granted := 0
	if g, _ := l.Acquire(bg, 5); g.Acquired() {
		granted += 5
	}
	waited := make(chan ratelimit.Lease, 1)
	go func() { g, _ := l.Wait(bg, 5); waited <- g }()
	waitTimers(t, clock, 1)
	if err := l.Reconfigure(tokenbucket.Config{Rate: rate.Inf, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	if g, err := l.Acquire(bg, 3); err != nil || !g.Acquired() || g.Limit() != -1 {
		t.Errorf("Acquire under rate.Inf, a reservation asleep: %v, %v; want granted, no limit", g, err)
	}
	if err := l.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	if g := <-waited; g.Acquired() {
		granted += 5
	}
	if g, _ := l.Acquire(bg, 5); g.Acquired() {
		granted += 5
	}
	if granted > 10 {
		t.Errorf("over-admission through rate.Inf: %d > 10", granted)
	}
}

// TestRefundOfAStateLaidOutByAnotherWindow: during a rollout, processes of
// two window lengths share a key. A refund that finds the state laid out
// by the other length gives nothing back: the count it finds may hold the
// other process's grants only (its own dropped when the shorter window
// rolled), and taking one back would let both windows pass their limit.
func TestRefundOfAStateLaidOutByAnotherWindow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		long, short ratelimit.Config
	}{
		{"fixedwindow", fixedwindow.Config{Limit: 3, Window: time.Minute}, fixedwindow.Config{Limit: 3, Window: 10 * time.Second}},
		{"slidingwindow", slidingwindow.Config{Limit: 3, Window: time.Minute}, slidingwindow.Config{Limit: 3, Window: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := miniClient(t)
			clock := ratelimittest.NewClockAt(time.Unix(1_800_000_000, 0).Truncate(time.Minute))
			t0 := clock.Now()
			at := func(s int) { clock.Set(t0.Add(time.Duration(s) * time.Second)) }
			long := mustNew(t, c, "rollout", tc.long, redis.WithClock(clock), redis.WithoutRefusalCache())
			short := mustNew(t, c, "rollout", tc.short, redis.WithClock(clock), redis.WithoutRefusalCache())
			at(5)
			a, _ := long.Acquire(bg, 1)
			at(12)
			short.Acquire(bg, 1)
			at(21)
			if g, _ := short.Acquire(bg, 1); !g.Acquired() || !a.Acquired() {
				t.Fatalf("grants: %v %v", a, g)
			}
			at(22) // the short window [20s, 30s) holds 1; the long one's grant at 5s is gone from the state
			if err := long.Refund(bg, a, 1); err != nil {
				t.Fatal(err)
			}
			granted := 0
			for range 5 {
				if g, _ := long.Acquire(bg, 1); g.Acquired() {
					granted++
				}
			}
			if granted > 2 {
				t.Errorf("after the refund, %d more granted at 22s: the short window [20s, 30s) holds %d of its 3", granted, 1+granted)
			}
		})
	}
}

// A concurrency grant reports the limit in force: after a Reconfigure
// from 4 to 10, a second grant reports Limit 10 and Remaining 8, as in
// memory. A lease granted before it still releases its permit, and one
// refunded gives it back once.
func TestReconfigureConcurrencyGrantsReportNewLimit(t *testing.T) {
	_, c := miniClient(t)
	l, err := redis.New(c, "conc-limit", concurrency.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	old, err := l.Acquire(bg, 1)
	if err != nil || !old.Acquired() || old.Limit() != 4 {
		t.Fatalf("Acquire under Limit 4: %v, %v, Limit %d", old, err, old.Limit())
	}
	if err := l.Reconfigure(concurrency.Config{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	now, err := l.Acquire(bg, 1)
	if err != nil || !now.Acquired() || now.Limit() != 10 || now.Remaining() != 8 {
		t.Fatalf("Acquire under Limit 10, one lease held: %v, Limit %d, Remaining %d; want Limit 10, Remaining 8", err, now.Limit(), now.Remaining())
	}
	if err := l.Refund(bg, old, 1); err != nil {
		t.Fatalf("Refund of the lease granted under Limit 4: %v", err)
	}
	old.Release() // released already: nothing more
	now.Release()
	for i := range 10 {
		if g, err := l.Acquire(bg, 1); err != nil || !g.Acquired() || g.Remaining() != int64(9-i) {
			t.Fatalf("grant %d of 10 after both leases came back: %v, %v, Remaining %d", i+1, g.Acquired(), err, g.Remaining())
		}
	}
	if g, _ := l.Acquire(bg, 1); g.Acquired() {
		t.Fatal("an eleventh permit granted under Limit 10")
	}
}

// A change of a token bucket's Rate carries over as each backend's doc
// says: memory refills at the old rate up to the change, Redis refills
// the time since the bucket's last decision at the new rate. Drained at
// 100/s, then 50ms later set to 1/s: memory holds the 5 tokens of those
// 50ms, Redis the 0.05 that 1/s gives them.
func TestReconfigureTokenBucketRateOnEachBackend(t *testing.T) {
	_, c := miniClient(t)
	clock := ratelimittest.NewClock()
	old, cfg := tokenbucket.Config{Rate: 100, Burst: 10}, tokenbucket.Config{Rate: 1, Burst: 10}
	ml, err := memory.New(old, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	rl := mustNew(t, c, key("tb-rate"), old, redis.WithClock(clock), redis.WithoutRefusalCache())
	for _, l := range []ratelimit.Limiter{ml, rl} {
		if g, _ := l.Acquire(bg, 10); !g.Acquired() {
			t.Fatalf("%T: the whole burst: %v", l, g)
		}
	}
	clock.Advance(50 * time.Millisecond)
	if err := ml.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := rl.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	for l, want := range map[ratelimit.Limiter]int{ml: 5, rl: 0} {
		granted := 0
		for range 10 {
			if g, _ := l.Acquire(bg, 1); g.Acquired() {
				granted++
			}
		}
		if granted != want {
			t.Errorf("%T: %d granted after the change, want %d", l, granted, want)
		}
	}
}
