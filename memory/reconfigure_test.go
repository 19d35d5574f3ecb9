package memory_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func available(t *testing.T, l memory.Limiter) int64 {
	t.Helper()
	return l.Stats().Available
}

// sibling makes a Factory of cfg on clock and one of its limiters, closed
// when the test ends.
func sibling(t *testing.T, cfg ratelimit.Config, clock *ratelimittest.Clock) (*memory.Factory, memory.Limiter) {
	t.Helper()
	f, err := memory.NewFactory(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := f.New()
	t.Cleanup(func() { l.Close() })
	return f, l
}

func reconfigure(t *testing.T, r interface{ Reconfigure(ratelimit.Config) error }, cfg ratelimit.Config) {
	t.Helper()
	if err := r.Reconfigure(cfg); err != nil {
		t.Fatalf("Reconfigure(%#v): %v", cfg, err)
	}
}

// The state carries over by each algorithm's rule: what is in use stays
// in use, held against the new limit.
func TestReconfigureCarriesState(t *testing.T) {
	for _, c := range []struct {
		name          string
		from, to      ratelimit.Config
		take          int
		wantAvailable int64 // right after the change
	}{
		{"tokenbucket clamped to the new burst", tokenbucket.Config{Rate: 1, Burst: 10}, tokenbucket.Config{Rate: 1, Burst: 3}, 5, 3},
		{"tokenbucket larger burst keeps its tokens", tokenbucket.Config{Rate: 1, Burst: 10}, tokenbucket.Config{Rate: 5, Burst: 20}, 5, 5},
		{"tokenbucket to interval refill", tokenbucket.Config{Rate: 1, Burst: 10}, tokenbucket.Config{Period: time.Second, PerPeriod: 2, Burst: 10}, 4, 6},
		{"fixed window count against a lower limit", fixedwindow.Config{Limit: 10, Window: time.Second}, fixedwindow.Config{Limit: 5, Window: time.Second}, 8, 0},
		{"fixed window count against a higher limit", fixedwindow.Config{Limit: 10, Window: time.Second}, fixedwindow.Config{Limit: 20, Window: time.Minute}, 8, 12},
		{"segmented to weighted window", slidingwindow.Config{Limit: 10, Window: time.Second, Segments: 4}, slidingwindow.Config{Limit: 12, Window: time.Second}, 7, 5},
		{"sliding log", slidinglog.Config{Limit: 10, Window: time.Second}, slidinglog.Config{Limit: 4, Window: time.Hour}, 3, 1},
		{"concurrency keeps its holders", concurrency.Config{Limit: 10}, concurrency.Config{Limit: 4}, 3, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := newLimiter(t, c.from, clock)
			if g := mustAcquire(t, l, c.take); !g.Acquired() {
				t.Fatalf("Acquire(%d): %v", c.take, g)
			}
			reconfigure(t, l, c.to)
			if got := available(t, l); got != c.wantAvailable {
				t.Fatalf("Available after the change = %d, want %d", got, c.wantAvailable)
			}
			g := mustAcquire(t, l, 1)
			if g.Acquired() != (c.wantAvailable > 0) || g.Limit() != c.to.Capacity() {
				t.Fatalf("Acquire(1) after the change: %v, want granted %v with the new limit %d", g, c.wantAvailable > 0, c.to.Capacity())
			}
		})
	}
}

// An invalid config, or one of another algorithm, changes nothing.
func TestReconfigureRefusesBadConfigs(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 3, Window: time.Second}, clock)
	mustAcquire(t, l, 1)
	for _, cfg := range []ratelimit.Config{
		fixedwindow.Config{Limit: 0, Window: time.Second},
		fixedwindow.Config{Limit: 3, Window: -1},
		tokenbucket.Config{Rate: 1, Burst: 3},
		nil,
	} {
		if err := l.Reconfigure(cfg); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("Reconfigure(%#v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if got := available(t, l); got != 2 {
		t.Fatalf("Available = %d after refused changes, want 2", got)
	}
	if _, err := l.Acquire(bg, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) && err != nil {
		t.Fatalf("Acquire(3): %v", err)
	}
	// A smaller capacity refuses larger requests at once.
	reconfigure(t, l, fixedwindow.Config{Limit: 2, Window: time.Second})
	if _, err := l.Acquire(bg, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Acquire(3) with a limit of 2: %v, want ErrExceedsLimit", err)
	}
}

// Queued waiters are examined again under the new configuration.
func TestReconfigureServesWaiters(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 2, Window: time.Hour, Queue: ratelimit.Queue{Limit: 5}}, clock)
	mustAcquire(t, l, 2)
	w := goWait(t, l, bg, 2, 2)
	reconfigure(t, l, fixedwindow.Config{Limit: 4, Window: time.Hour, Queue: ratelimit.Queue{Limit: 5}})
	granted(t, w, "the waiter after the limit grew")
	// The concurrency limit: a waiter is served once the holders fit the new limit.
	c := newLimiter(t, concurrency.Config{Limit: 2}, clock)
	a, b := mustAcquire(t, c, 1), mustAcquire(t, c, 1)
	wc := goWait(t, c, bg, 1, 1)
	reconfigure(t, c, concurrency.Config{Limit: 1})
	a.Release()
	select {
	case got := <-wc:
		t.Fatalf("served with 1 held and a limit of 1: %v", got.lease)
	case <-time.After(20 * time.Millisecond):
	}
	b.Release()
	if got := <-wc; !got.lease.Acquired() || got.lease.Limit() != 1 {
		t.Fatalf("after both released: %v, want granted with limit 1", got.lease)
	}
}

// A Factory's limiters share their configuration.
func TestFactoryReconfigure(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 4, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	old := f.New()
	mustAcquire(t, old, 3)
	if err := f.Reconfigure(fixedwindow.Config{Limit: 2, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := available(t, old); got != 0 {
		t.Errorf("a limiter made before: Available = %d, want 0 (3 used of the new 2)", got)
	}
	if got := available(t, f.New()); got != 2 {
		t.Errorf("a limiter made after: Available = %d, want 2", got)
	}
	if err := f.Reconfigure(tokenbucket.Config{Rate: 1, Burst: 1}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("Factory.Reconfigure to another algorithm: %v", err)
	}
}

func TestReset(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 1, Burst: 5, Queue: ratelimit.Queue{Limit: 5}}, clock)
	mustAcquire(t, l, 5)
	w := goWait(t, l, bg, 2, 2) // reserves 2: the bucket owes them
	if err := l.Reset(bg); err != nil {
		t.Fatal(err)
	}
	if a := <-w; !a.lease.Acquired() {
		t.Fatalf("the waiter after Reset: %v", a.lease)
	}
	if got := available(t, l); got != 3 {
		t.Fatalf("Available after Reset = %d, want 3 (5, less the waiter's 2)", got)
	}
	var nilCtx context.Context
	if err := l.Reset(nilCtx); !errors.Is(err, ratelimit.ErrNilContext) {
		t.Fatalf("Reset(nil) = %v", err)
	}
	c := newLimiter(t, concurrency.Config{Limit: 2}, clock)
	held := mustAcquire(t, c, 2)
	if err := c.Reset(bg); err != nil {
		t.Fatal(err)
	}
	if got := available(t, c); got != 2 {
		t.Fatalf("concurrency after Reset: Available = %d, want 2 (nothing held)", got)
	}
	after := mustAcquire(t, c, 1)
	held.Release() // held before the Reset: gives nothing back
	if got := available(t, c); got != 1 {
		t.Fatalf("a lease from before the Reset released: Available = %d, want 1", got)
	}
	after.Release()
	if got := available(t, c); got != 2 {
		t.Fatalf("after the release: Available = %d, want 2", got)
	}
	c.Close()
	if err := c.Reset(bg); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Reset after Close = %v", err)
	}
}

// On the real clock, with goroutines taking permits while the limit
// changes back and forth, no window admits more than the larger limit.
func TestReconfigureUnderContention(t *testing.T) {
	const window = 20 * time.Millisecond
	small := fixedwindow.Config{Limit: 5, Window: window}
	large := fixedwindow.Config{Limit: 10, Window: window}
	l, err := memory.New(small)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	perWindow := map[int64]int64{}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 4000 && !stop.Load(); n++ {
				before := time.Now().UnixNano() / int64(window)
				lease, err := l.Acquire(bg, 1)
				after := time.Now().UnixNano() / int64(window)
				if err != nil {
					t.Error(err)
					return
				}
				if lease.Acquired() && before == after { // attributable to one window
					mu.Lock()
					perWindow[before]++
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		cfg := small
		if i%2 == 0 {
			cfg = large
		}
		if err := l.Reconfigure(cfg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	for w, n := range perWindow {
		if n > int64(large.Limit) {
			t.Errorf("window %d admitted %d, over the larger limit %d", w, n, large.Limit)
		}
	}
	if len(perWindow) == 0 {
		t.Fatal("no grant recorded")
	}
}

// A cancelled Wait serves the queue under the configuration the limiter
// last synced to, not the current one (Factory limiters sync lazily).
func TestReconfigureThenCancelServesUnderNewConfig(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(concurrency.Config{Limit: 10}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := f.New()
	defer l.Close() // refuses w2
	mustAcquire(t, l, 6)
	ctx1, cancel1 := context.WithCancel(bg)
	w1 := goWait(t, l, ctx1, 5, 5) // 4 free: waits
	w2 := goWait(t, l, bg, 2, 7)   // behind w1 (OldestFirst)
	if err := f.Reconfigure(concurrency.Config{Limit: 6}); err != nil {
		t.Fatal(err)
	}
	cancel1()
	<-w1
	select {
	case a := <-w2:
		t.Errorf("w2 granted %v with 6 held and the limit now 6: 8 held (Stats %+v)", a.lease, l.Stats())
	case <-time.After(100 * time.Millisecond): // still waits: right
	}
}

// A token bucket in debt to a queued reservation keeps the debt on
// Reconfigure: Burst 5 and 5s at 1/s allow 10 in 5s, reconfigured or not,
// also through rate.Inf and back (rate.Inf reads no state: the bucket it
// kept goes on under the next configuration). Meanwhile rate.Inf grants
// everything, the reservation queued before it notwithstanding.
func TestReconfigureKeepsDebt(t *testing.T) {
	cfg := tokenbucket.Config{Rate: 1, Burst: 5}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, l memory.Limiter)
	}{
		{"unchanged", func(*testing.T, memory.Limiter) {}},
		{"queue bound", func(t *testing.T, l memory.Limiter) {
			cfg2 := cfg
			cfg2.Queue = ratelimit.Queue{Limit: 100} // only the queue bound changes
			reconfigure(t, l, cfg2)
		}},
		{"through rate.Inf", func(t *testing.T, l memory.Limiter) {
			reconfigure(t, l, tokenbucket.Config{Rate: rate.Inf, Burst: 5})
			if g := mustAcquire(t, l, 3); !g.Acquired() || g.Limit() != -1 {
				t.Errorf("Acquire under rate.Inf, a reservation queued: %v; want granted, no limit", g)
			}
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			if g, err := l.Wait(ctx, 5); err != nil || !g.Acquired() || g.Limit() != -1 {
				t.Errorf("Wait under rate.Inf, a reservation queued: %v, %v; want granted at once, no limit", g, err)
			}
			reconfigure(t, l, cfg)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := newLimiter(t, cfg, clock)
			granted := 0
			if mustAcquire(t, l, 5).Acquired() {
				granted += 5
			}
			w := goWait(t, l, bg, 5, 5)
			tc.change(t, l)
			clock.Advance(5 * time.Second)
			if a := <-w; a.lease.Acquired() {
				granted += 5
			}
			if mustAcquire(t, l, 5).Acquired() {
				granted += 5
			}
			if granted > 10 {
				t.Errorf("over-admission: %d > 10", granted)
			}
		})
	}
}

// An interval bucket in debt to a reservation, reconfigured to rate.Inf and
// then to continuous refill, still owes that debt: the bucket kept under
// rate.Inf is read for its debt only, not refilled under the next mode
// from the interval's period start (which erased the debt).
func TestReconfigureKeepsDebtThroughInfAcrossModes(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Period: time.Minute, PerPeriod: 10, Burst: 10}, clock)
	if g := mustAcquire(t, l, 10); !g.Acquired() {
		t.Fatalf("Acquire(10) on a full bucket: %v", g)
	}
	due := time.Duration(time.Minute.Nanoseconds() - clock.Now().UnixNano()%time.Minute.Nanoseconds()) // the next refill
	w := goWait(t, l, bg, 10, 10)
	clock.Advance(due - 2*time.Second)
	reconfigure(t, l, tokenbucket.Config{Rate: rate.Inf, Burst: 10})
	reconfigure(t, l, tokenbucket.Config{Rate: 1, Burst: 10})
	clock.Advance(2 * time.Second)
	if a := <-w; !a.lease.Acquired() {
		t.Fatalf("the reservation at its due instant: %v", a.lease)
	}
	if g := mustAcquire(t, l, 10); g.Acquired() {
		t.Errorf("Acquire(10) right after the reservation: %v; want refused (the bucket owes 10, 2s of refill at 1/s came since)", g)
	}
}

// A Factory's limiter checks permits against the capacity of the
// configuration it last synced to, before syncing.
func TestReconfigureFactoryCapacity(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 5, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := f.New()
	if err := f.Reconfigure(fixedwindow.Config{Limit: 10, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	if lease, err := l.Acquire(bg, 8); err != nil || !lease.Acquired() {
		t.Errorf("Acquire(8) after the limit rose to 10: %v, %v", lease, err)
	}
	g := f.New()
	if lease, err := g.Wait(bg, 8); err != nil || !lease.Acquired() {
		t.Errorf("Wait(8) after the limit rose to 10: %v, %v", lease, err)
	}
}

// A Factory's Reconfigure reaches a sibling's queue at the sibling's next
// call, whatever it is (Stats here): a waiter over the new capacity is
// refused, and the reservation behind it is served when its own tokens
// have come, not when the refused one's would have.
func TestFactoryReconfigureServesSiblingsQueue(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 1, Burst: 8, Queue: ratelimit.Queue{Limit: 10}}
	f, l := sibling(t, cfg, clock)
	mustAcquire(t, l, 8)
	big := goWait(t, l, bg, 5, 5)
	small := goWait(t, l, bg, 1, 6)
	cfg.Burst = 4
	reconfigure(t, f, cfg)
	if s := l.Stats(); s.Queued != 1 {
		t.Fatalf("after the sibling's Stats: %d permits queued, want 1 (the waiter of 5 refused)", s.Queued)
	}
	if a := <-big; a.err != nil || a.lease.Reason() != ratelimit.ReasonLimit {
		t.Fatalf("waiter of 5 over a burst of 4: %v, %v; want refused (ReasonLimit)", a.lease, a.err)
	}
	clock.Advance(time.Second)
	granted(t, small, "the waiter of 1, 1s after the waiter of 5 ahead was refused")
}

// A waiter queued for more than the new capacity is never served and
// blocks every later request.
func TestReconfigureRefusesOversizedWaiter(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 10, Window: time.Second}, clock)
	mustAcquire(t, l, 10)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	w := goWait(t, l, ctx, 8, 8)
	reconfigure(t, l, fixedwindow.Config{Limit: 5, Window: time.Second})
	for i := 0; i < 5; i++ {
		clock.Advance(time.Second)
	}
	select {
	case a := <-w:
		if a.err != nil || a.lease.Acquired() || a.lease.Reason() != ratelimit.ReasonLimit {
			t.Errorf("waiter of 8 after the limit fell to 5: %v, %v; want refused (ReasonLimit)", a.lease, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("waiter of 8 permits still queued 5 windows after the limit fell to 5")
	}
	if g := mustAcquire(t, l, 1); !g.Acquired() {
		t.Errorf("Acquire(1) in a fresh window with limit 5 refused: %v (stats %+v)", g, l.Stats())
	}
}

// A concurrency lease of more permits than the new limit cannot be refunded.
func TestReconfigureConcurrencyRefundAfterShrink(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, concurrency.Config{Limit: 10}, clock)
	g := mustAcquire(t, l, 8)
	reconfigure(t, l, concurrency.Config{Limit: 4})
	err := l.Refund(bg, g, 8)
	reconfigure(t, l, concurrency.Config{Limit: 10})
	if got := available(t, l); got != 10 {
		t.Errorf("Refund(8) after the limit fell to 4: err %v; Available afterwards = %d, want 10 (8 permits leaked)", err, got)
	}
}

// Weighted sliding window, and the same with a fixed window: Available is
// floored at 0, so a count over a shrunk limit is lost on the next change.
func TestReconfigureWeightedChain(t *testing.T) {
	clock := ratelimittest.NewClock()
	for _, tc := range []struct {
		name string
		cfg  func(limit int) ratelimit.Config
	}{
		{"weighted sliding window", func(n int) ratelimit.Config { return slidingwindow.Config{Limit: n, Window: time.Hour} }},
		{"fixed window", func(n int) ratelimit.Config { return fixedwindow.Config{Limit: n, Window: time.Hour} }},
	} {
		l := newLimiter(t, tc.cfg(10), clock)
		mustAcquire(t, l, 8)
		reconfigure(t, l, tc.cfg(5))
		reconfigure(t, l, tc.cfg(7))
		if got := available(t, l); got != 0 {
			t.Errorf("%s, 8 used, limit 10 -> 5 -> 7: Available = %d, want 0", tc.name, got)
		}
	}
}

func TestReconfigureRaceStress(t *testing.T) {
	f, _ := memory.NewFactory(concurrency.Config{Limit: 4})
	tf, _ := memory.NewFactory(tokenbucket.Config{Rate: 1000, Burst: 4})
	ls := []memory.Limiter{f.New(), f.New(), tf.New(), tf.New()}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			l := ls[g%4]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(bg, time.Duration(i%3)*time.Millisecond)
				lease, err := l.Wait(ctx, 1+i%3)
				cancel()
				if err == nil && lease.Acquired() {
					if i%2 == 0 {
						l.Refund(bg, lease, 1+i%3)
					}
					lease.Release()
				}
				l.Stats()
				l.IdleFor()
			}
		}(g)
	}
	for i := 0; i < 300; i++ {
		f.Reconfigure(concurrency.Config{Limit: 2 + i%5})
		tf.Reconfigure(tokenbucket.Config{Rate: 1000, Burst: 2 + i%5})
		if i%50 == 0 {
			ls[2].Reset(bg)
		}
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
}

// A Factory's Reconfigure carried over by a sibling's calls examines its
// queue once the call has done its own part, never in the middle of it:
// a release gives back its own lease's permits before a waiter takes its
// handle, a cancelled Wait is not granted after its cancel, and a Reset
// serves the queue from the fresh state only.
func TestFactoryReconfigureInsideSiblingsCalls(t *testing.T) {
	clock := ratelimittest.NewClock()
	t.Run("release", func(t *testing.T) {
		cfg := concurrency.Config{Limit: 4, Queue: ratelimit.Queue{Limit: 10}}
		f, l := sibling(t, cfg, clock)
		a := mustAcquire(t, l, 1)
		mustAcquire(t, l, 1)
		goWait(t, l, bg, 4, 4)
		w2 := goWait(t, l, bg, 2, 6)
		cfg.Queue.Order = ratelimit.NewestFirst
		reconfigure(t, f, cfg)
		a.Release() // 1 back: 3 free, and the newest waiter takes 2
		granted(t, w2, "the newest waiter, of 2")
		if got := available(t, l); got != 1 {
			t.Fatalf("after the release and the grant of 2: %d available, want 1 (4 - 1 held - 2)", got)
		}
		if g := mustAcquire(t, l, 2); g.Acquired() {
			t.Fatalf("Acquire(2) with 1 free: %v", g)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		cfg := fixedwindow.Config{Limit: 2, Window: time.Hour, Queue: ratelimit.Queue{Limit: 10}}
		f, l := sibling(t, cfg, clock)
		mustAcquire(t, l, 2)
		ctx, cancel := context.WithCancel(bg)
		w := goWait(t, l, ctx, 1, 1)
		cfg.Limit = 4
		reconfigure(t, f, cfg)
		cancel()
		if a := <-w; !errors.Is(a.err, context.Canceled) || a.lease.Acquired() {
			t.Fatalf("the cancelled Wait: %v, %v; want context.Canceled", a.lease, a.err)
		}
		if got := available(t, l); got != 2 {
			t.Fatalf("%d available after the cancel, want 2 of the new 4", got)
		}
	})
	t.Run("reset", func(t *testing.T) {
		cfg := fixedwindow.Config{Limit: 2, Window: time.Hour, Queue: ratelimit.Queue{Limit: 10}}
		f, l := sibling(t, cfg, clock)
		mustAcquire(t, l, 2)
		w1 := goWait(t, l, bg, 2, 2)
		w2 := goWait(t, l, bg, 2, 4)
		cfg.Limit = 4
		reconfigure(t, f, cfg)
		if err := control.Reset(bg, l); err != nil {
			t.Fatal(err)
		}
		for i, w := range []chan answer{w1, w2} {
			a := <-w
			if want := int64(2 - 2*i); !a.lease.Acquired() || a.lease.Remaining() != want {
				t.Fatalf("waiter %d after the Reset: %v, %v; want granted from the empty window, %d remaining", i+1, a.lease, a.err, want)
			}
		}
		if g := mustAcquire(t, l, 1); g.Acquired() {
			t.Fatalf("Acquire(1) after 4 of 4 were granted: %v", g)
		}
	})
}

// A higher rate repays a token bucket's reservations sooner, and its
// waiters are served then, not at the instants the old rate gave them:
// at 1 token per 100s, a waiter for the next token is due in 100s; at 100
// per second from the change, in 10ms. Meanwhile a request behind it is
// refused with the wait the new rate gives, not 0s. A lower rate never
// delays a waiter past the instant it was given.
func TestReconfigureRateBringsReservationsForward(t *testing.T) {
	// queued makes l's bucket empty and queues a Wait for 1 token on it.
	queued := func(l memory.Limiter) <-chan ratelimit.Lease {
		l.Acquire(bg, 1)
		done := make(chan ratelimit.Lease, 1)
		go func() { g, _ := l.Wait(bg, 1); done <- g }()
		for l.Stats().Queued == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		return done
	}
	served := func(what string, done <-chan ratelimit.Lease) {
		t.Helper()
		select {
		case g := <-done:
			if !g.Acquired() {
				t.Fatalf("%s: the waiter: %v, want granted", what, g)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the waiter was not served", what)
		}
	}
	for _, q := range []ratelimit.Queue{{}, {Order: ratelimit.NewestFirst}} {
		clock := ratelimittest.NewClock()
		l := newLimiter(t, tokenbucket.Config{Rate: 0.01, Burst: 1, Queue: q}, clock)
		done := queued(l)
		reconfigure(t, l, tokenbucket.Config{Rate: 100, Burst: 1, Queue: q})
		if q.Order == ratelimit.OldestFirst {
			behind, _ := l.Acquire(bg, 1)
			if d, ok := behind.RetryAfter(); behind.Acquired() || !ok || d < 19*time.Millisecond || d > 20*time.Millisecond {
				t.Fatalf("Acquire behind the waiter: %v, RetryAfter %v; want refused, 20ms (the waiter's token, then its own, at 100/s)", behind, d)
			}
		}
		clock.Advance(10 * time.Millisecond)
		served(q.Order.String()+", 10ms after the rate went to 100/s", done)
	}
	// Slower: the waiter keeps its instant (1s at 1/s), though at 0.01/s
	// its token would come in 100s.
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 1, Burst: 1}, clock)
	done := queued(l)
	reconfigure(t, l, tokenbucket.Config{Rate: 0.01, Burst: 1})
	clock.Advance(time.Second)
	served("slower, at the instant it was given", done)
}
