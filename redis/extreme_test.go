package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// setClock is a ratelimit.Clock that the test sets, backwards too. Its
// timers never fire: a Wait that sleeps on it ends by its ctx; Pending
// counts the sleepers.
type setClock struct {
	mu      sync.Mutex
	now     time.Time
	pending int
}

func newSetClock(t time.Time) *setClock { return &setClock{now: t} }

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *setClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *setClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending
}

func (c *setClock) AfterFunc(time.Duration, func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending++
	return (&setTimer{c: c}).Stop
}

type setTimer struct {
	c       *setClock
	stopped bool
}

func (t *setTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.stopped {
		return false
	}
	t.stopped = true
	t.c.pending--
	return true
}

// bothClients returns a miniredis client and a real server's.
func bothClients(t *testing.T) map[string]goredis.UniversalClient {
	_, mc := miniClient(t)
	return map[string]goredis.UniversalClient{"miniredis": mc, "redis": realClient(t)}
}

// slowLog is the duration past which the server logs a command: far above
// what a decision of bounded steps takes (under 1ms here; the server's
// clock also counts the time its process waits for a processor, which
// reached 11ms once when other suites loaded both cores), far below what
// a loop that ran away would (seconds, or for ever).
const slowLog = 100 * time.Millisecond

// slowServer starts a redis-server that logs every command slower than
// slowLog.
func slowServer(t *testing.T) *goredis.Client {
	t.Helper()
	srv := redistest.Start(t, "--slowlog-log-slower-than", strconv.FormatInt(slowLog.Microseconds(), 10))
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// noSlowCommands fails t for every command the server logged as slower
// than slowLog since the last SLOWLOG RESET.
func noSlowCommands(t *testing.T, c *goredis.Client) {
	t.Helper()
	entries, err := c.SlowLogGet(bg, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		args := e.Args
		if len(args) > 4 {
			args = args[:4]
		}
		t.Errorf("slow command (%v): %v", e.Duration, args)
	}
}

// warmUp loads cfg's script on c (its first run compiles it, which the
// server logs as slow on a busy machine: once per server, not per call).
func warmUp(t *testing.T, c *goredis.Client, cfg ratelimit.Config) {
	t.Helper()
	l := mustNew(t, c, "warm-up", cfg)
	if _, err := l.Acquire(bg, 0); err != nil {
		t.Fatal(err)
	}
}

// timed runs call and fails t when it took a second or more: a script that
// loops would block the server (and every client of it).
func timed(t *testing.T, what string, call func() (ratelimit.Lease, error)) ratelimit.Lease {
	t.Helper()
	start := time.Now()
	lease, err := call()
	if took := time.Since(start); took >= time.Second {
		t.Fatalf("%s took %v", what, took)
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return lease
}

const (
	maxLimit    = 1 << 53
	hundredYear = 100 * 365 * 24 * time.Hour // check.MaxDuration
)

// segmentedWindow is the longest window of at most 100 years that is a
// whole number of microseconds per segment.
func segmentedWindow(segments int) time.Duration {
	per := hundredYear / time.Microsecond / time.Duration(segments)
	return per * time.Duration(segments) * time.Microsecond
}

// TestExtremeConfigs runs the extreme values Validate accepts on a real
// server: every call returns within a second, no script runs slowLog or more,
// and for the rate algorithms RetryAfter is positive and exact: the same
// request is refused one microsecond before it and granted at it.
func TestExtremeConfigs(t *testing.T) {
	c := slowServer(t)
	year := 365 * 24 * time.Hour
	for _, tc := range []struct {
		name  string
		cfg   ratelimit.Config
		fill  int // permits that exhaust the limiter at once
		probe int // the request whose RetryAfter is checked
	}{
		{"tokenbucket-95y", tokenbucket.Config{Rate: rate.Every(95 * year), Burst: 1}, 1, 1},
		{"tokenbucket-1e-9", tokenbucket.Config{Rate: 1e-9, Burst: 1, Queue: ratelimit.Queue{Limit: 1}}, 1, 1},
		{"tokenbucket-2^53", tokenbucket.Config{Rate: maxLimit, Burst: maxLimit, Queue: ratelimit.Queue{Limit: 1}}, maxLimit, maxLimit}, // its Wait, 1s away, is refused: queue full
		{"tokenbucket-interval-100y", tokenbucket.Config{Period: hundredYear, PerPeriod: 1, Burst: maxLimit}, maxLimit, 1},
		{"fixedwindow", fixedwindow.Config{Limit: maxLimit, Window: hundredYear, Queue: ratelimit.Queue{Limit: maxLimit}}, maxLimit, 1},
		{"slidingwindow-weighted", slidingwindow.Config{Limit: maxLimit, Window: hundredYear, Queue: ratelimit.Queue{Limit: 1}}, maxLimit, 1},
		{"slidingwindow-weighted-all", slidingwindow.Config{Limit: maxLimit, Window: hundredYear}, maxLimit, maxLimit},
		{"slidingwindow-segmented", slidingwindow.Config{Limit: maxLimit, Window: segmentedWindow(slidingwindow.MaxSegments), Segments: slidingwindow.MaxSegments}, maxLimit, 1},
		{"slidinglog", slidinglog.Config{Limit: maxLimit, Window: hundredYear, Queue: ratelimit.Queue{Limit: 1}}, maxLimit, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := ratelimittest.Start
			clock := newSetClock(t0)
			warmUp(t, c, tc.cfg)
			if err := c.SlowLogReset(bg).Err(); err != nil {
				t.Fatal(err)
			}
			l := mustNew(t, c, "extreme-"+tc.name, tc.cfg, redis.WithClock(clock), redis.WithTimeout(time.Second), redis.WithoutRefusalCache())
			if g := timed(t, "Acquire(fill)", func() (ratelimit.Lease, error) { return l.Acquire(bg, tc.fill) }); !g.Acquired() {
				t.Fatalf("Acquire(%d) on a fresh limiter: %v", tc.fill, g)
			}
			for i := 0; i < 3; i++ {
				lease := timed(t, "Acquire(probe)", func() (ratelimit.Lease, error) { return l.Acquire(bg, tc.probe) })
				ra, ok := lease.RetryAfter()
				if lease.Acquired() || !ok || ra <= 0 {
					t.Fatalf("Acquire(%d) on an exhausted limiter: %v, want refused with a positive RetryAfter", tc.probe, lease)
				}
				if ra%time.Microsecond != 0 {
					t.Fatalf("RetryAfter %v is not whole microseconds", ra)
				}
				ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Hour))
				w := timed(t, "Wait", func() (ratelimit.Lease, error) { return l.Wait(ctx, tc.probe) })
				cancel()
				if w.Acquired() {
					t.Fatalf("Wait with an hour left granted: %v", w)
				}
				if i < 2 {
					continue
				}
				now := clock.Now()
				clock.Set(now.Add(ra - time.Microsecond))
				early := timed(t, "Acquire 1us early", func() (ratelimit.Lease, error) { return l.Acquire(bg, tc.probe) })
				if d, _ := early.RetryAfter(); early.Acquired() || d != time.Microsecond {
					t.Fatalf("1us before RetryAfter %v: %v (retry %v), want refused with RetryAfter 1us", ra, early, d)
				}
				clock.Set(now.Add(ra))
				if late := timed(t, "Acquire at RetryAfter", func() (ratelimit.Lease, error) { return l.Acquire(bg, tc.probe) }); !late.Acquired() {
					t.Fatalf("at RetryAfter %v: %v, want granted", ra, late)
				}
			}
			noSlowCommands(t, c)
		})
	}
}

// TestExtremeReservations: token-bucket reservations whose due instants are
// decades away (1 token per 31.7 years) are made, refused by deadline and
// refunded in bounded time; a reservation due past the year 2255 is
// refused as queue full and changes nothing.
func TestExtremeReservations(t *testing.T) {
	c := slowServer(t)
	cfg := tokenbucket.Config{Rate: 1e-9, Burst: 1, Queue: ratelimit.Queue{Limit: 1}}
	warmUp(t, c, cfg)
	if err := c.SlowLogReset(bg).Err(); err != nil {
		t.Fatal(err)
	}
	clock := newSetClock(ratelimittest.Start)
	l := mustNew(t, c, "reserve-1e-9", cfg, redis.WithClock(clock), redis.WithTimeout(time.Second))
	l.Acquire(bg, 1)
	before, _ := l.Acquire(bg, 1)
	ra, _ := before.RetryAfter()
	if ra < 31*365*24*time.Hour {
		t.Fatalf("RetryAfter %v, want about 31.7 years", ra)
	}
	// A deadline one microsecond short is refused, one that is not reserves.
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(ra-time.Microsecond))
	if w := timed(t, "Wait", func() (ratelimit.Lease, error) { return l.Wait(ctx, 1) }); w.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with RetryAfter-1us left: %v, want ReasonDeadline", w)
	} else if d, _ := w.RetryAfter(); d != ra {
		t.Fatalf("Wait refused by deadline with RetryAfter %v, Acquire said %v", d, ra)
	}
	cancel()
	ctx, cancel = context.WithDeadline(bg, clock.Now().Add(ra))
	done := make(chan error, 1)
	go func() { _, err := l.Wait(ctx, 1); done <- err }()
	for clock.Pending() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	// The queue holds 1 permit: a second reservation is refused.
	if w := timed(t, "Wait", func() (ratelimit.Lease, error) { return l.Wait(bg, 1) }); w.Reason() != ratelimit.ReasonQueueFull {
		t.Fatalf("a second reservation: %v, want ReasonQueueFull", w)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v", err)
	}
	// The refund restored the bucket and the horizon.
	if after := timed(t, "Acquire", func() (ratelimit.Lease, error) { return l.Acquire(bg, 1) }); after.Acquired() {
		t.Fatalf("after the refund: %v", after)
	} else if d, _ := after.RetryAfter(); d != ra {
		t.Fatalf("after the refund RetryAfter = %v, before the reservation %v", d, ra)
	}

	// Near the year 2255 a reservation would be due past it: refused as
	// queue full, changing nothing.
	far := time.UnixMicro(1<<53 - int64(365*24*time.Hour/time.Microsecond))
	clock.Set(far)
	l2 := mustNew(t, c, "reserve-far", cfg, redis.WithClock(clock), redis.WithTimeout(time.Second))
	l2.Acquire(bg, 1)
	first, _ := l2.Acquire(bg, 1)
	if w := timed(t, "Wait", func() (ratelimit.Lease, error) { return l2.Wait(bg, 1) }); w.Reason() != ratelimit.ReasonQueueFull {
		t.Fatalf("a reservation due after 2255: %v, want ReasonQueueFull", w)
	}
	if again, _ := l2.Acquire(bg, 1); again.Acquired() || again.String() != first.String() {
		t.Fatalf("after the refused reservation: %v, before it %v", again, first)
	}
	noSlowCommands(t, c)
}

// TestSlidingLogRunningTotalWraps: the sliding log's running totals wrap
// modulo 2^53 and stay exact: with Limit 2^53, three full turns.
func TestSlidingLogRunningTotalWraps(t *testing.T) {
	c := slowServer(t)
	clock := newSetClock(ratelimittest.Start)
	const w = time.Hour
	cfg := slidinglog.Config{Limit: maxLimit, Window: w}
	warmUp(t, c, cfg)
	if err := c.SlowLogReset(bg).Err(); err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, c, "wrap", cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
	t0 := clock.Now()
	for turn := 0; turn < 3; turn++ {
		at := t0.Add(time.Duration(turn) * w)
		clock.Set(at)
		if g, _ := l.Acquire(bg, maxLimit-1); !g.Acquired() {
			t.Fatalf("turn %d: Acquire(2^53-1): %v", turn, g)
		}
		clock.Set(at.Add(time.Microsecond))
		if g, _ := l.Acquire(bg, 1); !g.Acquired() || g.Remaining() != 0 {
			t.Fatalf("turn %d: Acquire(1): %v", turn, g)
		}
		if r, _ := l.Acquire(bg, 1); r.Acquired() {
			t.Fatalf("turn %d: granted beyond 2^53: %v", turn, r)
		} else if d, _ := r.RetryAfter(); d != w-time.Microsecond {
			t.Fatalf("turn %d: RetryAfter %v, want %v", turn, d, w-time.Microsecond)
		}
		clock.Set(at.Add(w))
		if s, _ := l.Acquire(bg, 0); !s.Acquired() || s.Remaining() != maxLimit-1 {
			t.Fatalf("turn %d: status once the first grant left: %v, want %d remaining", turn, s, int64(maxLimit-1))
		}
	}
	noSlowCommands(t, c)
}

// TestOutOfOrderInstants: an instant older than the state's (a clock read
// before another process decided) is never granted more than a moment
// later would be.
func TestOutOfOrderInstants(t *testing.T) {
	for name, c := range bothClients(t) {
		t.Run(name, func(t *testing.T) {
			t0 := ratelimittest.Start
			clock := newSetClock(t0)
			// Token bucket: the older instant refills nothing and does not
			// move the bucket's instant back (which would refill the same
			// interval twice).
			tb := mustNew(t, c, "ooo-tb", tokenbucket.Config{Rate: 1, Burst: 2}, redis.WithClock(clock), redis.WithoutRefusalCache())
			for i, step := range []struct {
				at      time.Duration
				granted bool
			}{{0, true}, {-900 * time.Millisecond, true}, {100 * time.Millisecond, false}} {
				clock.Set(t0.Add(step.at))
				if g, err := tb.Acquire(bg, 1); err != nil || g.Acquired() != step.granted {
					t.Fatalf("token bucket step %d (at %v): %v %v, want granted %v", i, step.at, g, err, step.granted)
				}
			}
			if r, _ := tb.Acquire(bg, 1); r.Acquired() {
				t.Fatal("granted")
			} else if d, _ := r.RetryAfter(); d != 900*time.Millisecond {
				t.Fatalf("token bucket RetryAfter at T+0.1s = %v, want 900ms", d)
			}

			// Sliding log: the older grant is recorded at the newest entry's
			// instant, so the log stays in order and every figure is exact.
			sl := mustNew(t, c, "ooo-sl", slidinglog.Config{Limit: 2, Window: time.Second}, redis.WithClock(clock), redis.WithoutRefusalCache())
			clock.Set(t0)
			sl.Acquire(bg, 1)
			clock.Set(t0.Add(-900 * time.Millisecond))
			if g, _ := sl.Acquire(bg, 1); !g.Acquired() || g.ResetAfter() != 1900*time.Millisecond {
				t.Fatalf("sliding log grant at T-0.9s: %v reset %v, want granted, reset 1.9s (counted at T)", g, g.ResetAfter())
			}
			clock.Set(t0.Add(200 * time.Millisecond))
			s, _ := sl.Acquire(bg, 0)
			ra, ok := s.RetryAfter()
			if s.Acquired() || !ok || ra != 800*time.Millisecond || s.ResetAfter() != 800*time.Millisecond {
				t.Fatalf("sliding log status at T+0.2s: %v retry %v reset %v, want refused, retry and reset 800ms", s, ra, s.ResetAfter())
			}
			now := clock.Now()
			clock.Set(now.Add(ra - time.Microsecond))
			if e, _ := sl.Acquire(bg, 0); e.Acquired() {
				t.Fatalf("sliding log 1us before RetryAfter: %v", e)
			}
			clock.Set(now.Add(ra))
			if g, _ := sl.Acquire(bg, 2); !g.Acquired() {
				t.Fatalf("sliding log at RetryAfter: %v", g)
			}
		})
	}
}

// TestCancelKeepsArrivalOrder: a cancelled reservation gives its tokens
// back, and a newcomer still does not overtake the waiter reserved behind
// it (OldestFirst), here across two handles of one key; a Wait whose
// deadline falls before that waiter's turn is refused at once. NewestFirst
// lets the newcomer take the free tokens.
func TestCancelKeepsArrivalOrder(t *testing.T) {
	c1 := realClient(t)
	c2 := goredis.NewClient(&goredis.Options{Addr: c1.Options().Addr}) // a second process's pool
	defer c2.Close()
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			clock := ratelimittest.NewClock()
			cfg := tokenbucket.Config{Rate: 10, Burst: 2, Queue: ratelimit.Queue{Limit: 10, Order: order}}
			key := "cancel-order-" + order.String()
			a := mustNew(t, c1, key, cfg, redis.WithClock(clock))
			b := mustNew(t, c2, key, cfg, redis.WithClock(clock))
			if g, _ := a.Acquire(bg, 2); !g.Acquired() {
				t.Fatal(g)
			}
			ctx1, cancel1 := context.WithCancel(bg)
			first := make(chan error, 1)
			go func() { _, err := a.Wait(ctx1, 2); first <- err }() // due at +200ms
			for clock.Pending() < 1 {
				time.Sleep(100 * time.Microsecond)
			}
			second := make(chan ratelimit.Lease, 1)
			go func() { l, _ := b.Wait(bg, 1); second <- l }() // due at +300ms
			for clock.Pending() < 2 {
				time.Sleep(100 * time.Microsecond)
			}
			cancel1()
			if err := <-first; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Wait: %v", err)
			}
			clock.Advance(200 * time.Millisecond)
			newcomer, _ := a.Acquire(bg, 1)
			if order == ratelimit.NewestFirst {
				if !newcomer.Acquired() {
					t.Fatalf("NewestFirst newcomer at +200ms: %v, want granted (a token is free)", newcomer)
				}
			} else {
				if d, _ := newcomer.RetryAfter(); newcomer.Acquired() || d != 100*time.Millisecond {
					t.Fatalf("newcomer at +200ms: %v (retry %v), want refused behind the waiter due at +300ms, retry 100ms", newcomer, d)
				}
				ctx, cancel := context.WithDeadline(bg, clock.Now().Add(50*time.Millisecond))
				w, err := b.Wait(ctx, 1)
				cancel()
				if d, _ := w.RetryAfter(); err != nil || w.Reason() != ratelimit.ReasonDeadline || d < 100*time.Millisecond {
					t.Fatalf("Wait with 50ms left at +200ms: %v (retry %v) %v, want ReasonDeadline, retry >= 100ms", w, d, err)
				}
			}
			select {
			case l := <-second:
				t.Fatalf("the waiter due at +300ms answered at +200ms: %v", l)
			default:
			}
			clock.Advance(100 * time.Millisecond)
			if l := <-second; !l.Acquired() {
				t.Fatalf("the waiter at +300ms: %v", l)
			}
		})
	}
}

// TestWaitForAvailability: Wait(ctx, 0) waits until a permit is available,
// then returns a grant that took nothing; without a queue too.
func TestWaitForAvailability(t *testing.T) {
	_, c := miniClient(t)
	for _, cfg := range []ratelimit.Config{
		fixedwindow.Config{Limit: 1, Window: time.Second},
		tokenbucket.Config{Rate: 1, Burst: 1, Queue: ratelimit.Queue{Limit: 1}},
		slidinglog.Config{Limit: 1, Window: time.Second},
	} {
		t.Run(fmt.Sprintf("%T", cfg), func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := mustNew(t, c, fmt.Sprintf("wait0-%T", cfg), cfg, redis.WithClock(clock))
			l.Acquire(bg, 1)
			done := make(chan ratelimit.Lease, 1)
			go func() {
				lease, err := l.Wait(bg, 0)
				if err != nil {
					t.Error(err)
				}
				done <- lease
			}()
			for clock.Pending() == 0 {
				select {
				case lease := <-done:
					t.Fatalf("Wait(0) answered before a permit was back: %v", lease)
				case <-time.After(100 * time.Microsecond):
				}
			}
			clock.Advance(1100 * time.Millisecond) // RetryAfter plus at most 10% jitter
			if lease := <-done; !lease.Acquired() || lease.Remaining() != 1 {
				t.Fatalf("Wait(0) once a permit is back: %v, want granted with 1 remaining", lease)
			}
			if lease, _ := l.Acquire(bg, 1); !lease.Acquired() {
				t.Fatalf("Acquire(1) after Wait(0): %v: Wait(0) took a permit", lease)
			}
		})
	}
	// A concurrency limit: Wait(0) polls until a holder releases.
	cl := mustNew(t, c, "wait0-cc", concurrency.Config{Limit: 1})
	held, _ := cl.Acquire(bg, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		held.Release()
	}()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if lease, err := cl.Wait(ctx, 0); err != nil || !lease.Acquired() {
		t.Fatalf("concurrency Wait(0): %v %v", lease, err)
	}
}

// TestRefund: every limiter is a refunder (control.Refund). A refund right after
// the grant gives its permits back; one after the permits came back with
// time gives nothing.
func TestRefund(t *testing.T) {
	var _ interface {
		Refund(context.Context, ratelimit.Lease, int) error
	} = (*redis.Limiter)(nil)
	for name, c := range bothClients(t) {
		t.Run(name, func(t *testing.T) { testRefund(t, c) })
	}
}

func testRefund(t *testing.T, c goredis.UniversalClient) {
	for _, tc := range []struct {
		name  string
		cfg   ratelimit.Config
		moved time.Duration // after which the first grant no longer counts
		tb    bool
	}{
		{"tokenbucket", tokenbucket.Config{Rate: 1, Burst: 3}, 3 * time.Second, true},
		{"tokenbucket-interval", tokenbucket.Config{Period: time.Second, PerPeriod: 3, Burst: 3}, time.Second, true},
		{"fixedwindow", fixedwindow.Config{Limit: 3, Window: time.Second}, time.Second, false},
		{"slidingwindow-segmented", slidingwindow.Config{Limit: 3, Window: time.Second, Segments: 4}, time.Second, false},
		{"slidingwindow-weighted", slidingwindow.Config{Limit: 3, Window: time.Second}, 2 * time.Second, false},
		{"slidinglog", slidinglog.Config{Limit: 3, Window: time.Second}, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := mustNew(t, c, "refund-"+tc.name, tc.cfg, redis.WithClock(clock))
			clock.Advance(100 * time.Millisecond)
			g, _ := l.Acquire(bg, 3)
			if !g.Acquired() {
				t.Fatal(g)
			}
			if r, _ := l.Acquire(bg, 1); r.Acquired() {
				t.Fatalf("Acquire(1) on an exhausted limiter: %v", r)
			}
			if err := l.Refund(bg, g, 3); err != nil {
				t.Fatal(err)
			}
			// A granted status check took nothing: its refund gives nothing.
			status, _ := l.Acquire(bg, 0)
			if !status.Acquired() {
				t.Fatalf("status check after the refund: %v", status)
			}
			if err := l.Refund(bg, status, 3); err != nil {
				t.Fatal(err)
			}
			again, _ := l.Acquire(bg, 3)
			if !again.Acquired() {
				t.Fatalf("Acquire(3) after the refund: %v", again)
			}
			// Refunds of leases it did not grant change nothing.
			refused, _ := l.Acquire(bg, 1)
			refusedStatus, _ := l.Acquire(bg, 0)
			for _, other := range []ratelimit.Lease{refused, refusedStatus, status, {}, (&ratelimit.Outcome{Limit: 3}).Lease(0, 0, 0, 0)} {
				if err := l.Refund(bg, other, 1); err != nil {
					t.Fatal(err)
				}
			}
			if r, _ := l.Acquire(bg, 1); r.Acquired() {
				t.Fatalf("a refund of a lease not granted by this limiter gave permits back: %v", r)
			}
			// Once the grant's permits came back with time, its refund gives
			// nothing: a bucket is full already (tokens beyond the burst are
			// not given), a window's count is another grant's.
			clock.Advance(tc.moved)
			if tc.tb {
				if err := l.Refund(bg, again, 3); err != nil {
					t.Fatal(err)
				}
			}
			now, _ := l.Acquire(bg, 3)
			if !now.Acquired() {
				t.Fatalf("Acquire(3) after %v: %v", tc.moved, now)
			}
			if !tc.tb {
				if err := l.Refund(bg, again, 3); err != nil {
					t.Fatal(err)
				}
			}
			if r, _ := l.Acquire(bg, 1); r.Acquired() {
				t.Fatalf("a refund after the window moved gave permits back: %v", r)
			}
			// Errors: the arguments are checked.
			if err := l.Refund(bg, now, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
				t.Fatalf("Refund(-1): %v", err)
			}
		})
	}
	// A refund of a grant followed by newer ones takes it back from its own
	// entry or segment: the newer grants leave the window when they would.
	for _, tc := range []struct {
		name   string
		cfg    ratelimit.Config
		second time.Duration // when the second grant is made
		retry  time.Duration // RetryAfter at +1s, from the second grant's entry
	}{
		{"slidinglog", slidinglog.Config{Limit: 3, Window: time.Second}, 100 * time.Millisecond, 100 * time.Millisecond},
		{"slidingwindow-segmented", slidingwindow.Config{Limit: 3, Window: time.Second, Segments: 4}, 300 * time.Millisecond, 250 * time.Millisecond},
	} {
		t.Run(tc.name+"/older", func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := mustNew(t, c, "refund-older-"+tc.name, tc.cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
			t0 := clock.Now()
			first, _ := l.Acquire(bg, 2)
			clock.Set(t0.Add(tc.second))
			if g, _ := l.Acquire(bg, 1); !first.Acquired() || !g.Acquired() {
				t.Fatal(first, g)
			}
			if err := l.Refund(bg, first, 2); err != nil {
				t.Fatal(err)
			}
			if s, _ := l.Acquire(bg, 0); s.Remaining() != 2 {
				t.Fatalf("after refunding the older grant: %v, want 2 remaining", s)
			}
			if g, _ := l.Acquire(bg, 2); !g.Acquired() {
				t.Fatalf("Acquire(2) after the refund: %v", g)
			}
			clock.Set(t0.Add(time.Second))
			r, _ := l.Acquire(bg, 1)
			if d, _ := r.RetryAfter(); r.Acquired() || d != tc.retry {
				t.Fatalf("at +1s: %v (retry %v), want refused, retry %v", r, d, tc.retry)
			}
		})
	}

	// Concurrency: Refund releases.
	cl := mustNew(t, c, "refund-cc", concurrency.Config{Limit: 3})
	held, _ := cl.Acquire(bg, 2)
	if err := cl.Refund(bg, held, 2); err != nil {
		t.Fatal(err)
	}
	if g, _ := cl.Acquire(bg, 3); !g.Acquired() {
		t.Fatalf("Acquire(3) after refunding a concurrency lease: %v", g)
	} else {
		g.Release()
	}
	held.Release() // already released: nothing
	if s := cl.Stats(); s.Available != 3 {
		t.Fatalf("Stats after every lease went back: %+v", s)
	}
}

// TestTypedNilConfig: a nil pointer to a config is an error, not a panic.
func TestTypedNilConfig(t *testing.T) {
	_, c := miniClient(t)
	for _, cfg := range []ratelimit.Config{(*fixedwindow.Config)(nil), (*tokenbucket.Config)(nil), (*slidingwindow.Config)(nil),
		(*slidinglog.Config)(nil), (*concurrency.Config)(nil), nil} {
		if _, err := redis.New(c, "k", cfg); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("New(%T(nil)): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestRefundHoldsBackWhatRefilled: Rate 10, Burst 3: one token at t0 from a
// full bucket, two more at t0+50ms, the first refunded at t0+100ms.
// Without the first grant the bucket would have stayed full until
// t0+50ms and hold 1.5 tokens at t0+100ms: a refund that added the whole
// token (2.0) would grant 2 there. As tokenbucket's model.Refund.
func TestRefundHoldsBackWhatRefilled(t *testing.T) {
	for name, c := range bothClients(t) {
		t.Run(name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := mustNew(t, c, "refund-refill", tokenbucket.Config{Rate: 10, Burst: 3}, redis.WithClock(clock))
			first, _ := l.Acquire(bg, 1)
			clock.Advance(50 * time.Millisecond)
			if g, _ := l.Acquire(bg, 2); !first.Acquired() || !g.Acquired() {
				t.Fatalf("grants: %v, %v", first, g)
			}
			clock.Advance(50 * time.Millisecond)
			if err := l.Refund(bg, first, 1); err != nil {
				t.Fatal(err)
			}
			if g, _ := l.Acquire(bg, 2); g.Acquired() {
				t.Fatalf("Acquire(2) after the refund: granted; the bucket without the first grant holds 1.5 tokens")
			}
			if g, _ := l.Acquire(bg, 1); !g.Acquired() {
				t.Fatalf("Acquire(1) after the refund: %v, want granted (1.5 tokens without the first grant)", g)
			}
		})
	}
}

// TestCancelsNeverLetANewcomerOvertake: Rate 1, Burst 5, OldestFirst. W1
// (5 permits, due +5s), W2 (1, due +6s) and W3 (1, due +7s) reserve; W1 and
// then W3 cancel. W2 still sleeps until +6s in its process, so a newcomer
// at +3s must be refused behind it (it was granted when the second cancel
// moved the horizon back).
func TestCancelsNeverLetANewcomerOvertake(t *testing.T) {
	for name, c := range bothClients(t) {
		t.Run(name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			cfg := tokenbucket.Config{Rate: 1, Burst: 5, Queue: ratelimit.Queue{Limit: 10}}
			a := mustNew(t, c, "cancels", cfg, redis.WithClock(clock))
			b := mustNew(t, c, "cancels", cfg, redis.WithClock(clock))
			if g, _ := a.Acquire(bg, 5); !g.Acquired() {
				t.Fatal(g)
			}
			// wait starts a Wait and returns once it sleeps: its timer is the
			// pending-th, so reservations are made in order.
			wait := func(l *redis.Limiter, p, pending int) (context.CancelFunc, chan error) {
				ctx, cancel := context.WithCancel(bg)
				done := make(chan error, 1)
				go func() { _, err := l.Wait(ctx, p); done <- err }()
				for clock.Pending() < pending {
					time.Sleep(time.Millisecond)
				}
				return cancel, done
			}
			cancel1, done1 := wait(a, 5, 1)
			_, done2 := wait(b, 1, 2) // W2, in the other process
			cancel3, done3 := wait(a, 1, 3)
			cancel1()
			<-done1
			cancel3()
			<-done3
			clock.Advance(3 * time.Second)
			if g, _ := a.Acquire(bg, 1); g.Acquired() {
				t.Fatalf("a newcomer at +3s was granted while W2 (due +6s) still sleeps")
			}
			clock.Advance(3 * time.Second)
			if err := <-done2; err != nil {
				t.Fatalf("W2: %v", err)
			}
		})
	}
}
