package memory_test

// One test per reproduction of a defect found on the production path: each
// failed on the code before its fix.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// skewClock is a clock that can be set backwards, as a clock read before
// the limiter's lock effectively is when another goroutine decides first.
type skewClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *skewClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *skewClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(time.Hour, f).Stop // never fires within a test
}

func mustAcquire(t *testing.T, l ratelimit.Limiter, p int) ratelimit.Lease {
	t.Helper()
	lease, err := l.Acquire(bg, p)
	if err != nil {
		t.Fatalf("Acquire(%d): %v", p, err)
	}
	return lease
}

// Defect 1: an instant older than the bucket's refilled the same interval
// twice. Rate 1, Burst 2: at T, at T-0.9s, at T+0.1s: the third is refused.
func TestOlderInstantRefillsNothing(t *testing.T) {
	T := ratelimittest.Start
	c := &skewClock{now: T}
	l, err := memory.New(tokenbucket.Config{Rate: 1, Burst: 2}, memory.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mustAcquire(t, l, 1)
	c.set(T.Add(-900 * time.Millisecond))
	mustAcquire(t, l, 1)
	c.set(T.Add(100 * time.Millisecond))
	if lease := mustAcquire(t, l, 1); lease.Acquired() {
		t.Fatalf("third Acquire(1) within 100ms of a full Burst 2: granted, want refused")
	}
}

// Defect 2: a sliding log grant at an older instant went in after newer
// entries; a Wait(2) queued after it was never woken.
func TestSlidingLogOlderInstantWakesWaiter(t *testing.T) {
	T := ratelimittest.Start
	c := ratelimittest.NewClockAt(T.Add(-900 * time.Millisecond))
	skew := &skewClock{now: T}
	// Decisions read skew; timers run on c, which the test advances.
	l, err := memory.New(slidinglog.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 2}}, memory.WithClock(clockPair{skew, c}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mustAcquire(t, l, 1)
	skew.set(T.Add(-900 * time.Millisecond))
	mustAcquire(t, l, 1)
	if _, ok := l.IdleFor(); ok {
		t.Fatalf("IdleFor says idle with two grants in the window")
	}
	skew.set(T.Add(200 * time.Millisecond))
	c.Set(T.Add(200 * time.Millisecond))
	done := make(chan ratelimit.Lease, 1)
	go func() {
		lease, _ := l.Wait(bg, 2)
		done <- lease
	}()
	for l.Stats().Queued != 2 {
		time.Sleep(time.Millisecond)
	}
	skew.set(T.Add(time.Second))
	c.Set(T.Add(time.Second))
	select {
	case lease := <-done:
		if !lease.Acquired() {
			t.Fatalf("Wait(2): %v, want granted once both grants left the window", lease)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Wait(2) never woken after both grants left the window")
	}
}

// clockPair reads the time from now and sets timers on timers.
type clockPair struct {
	now    *skewClock
	timers *ratelimittest.Clock
}

func (c clockPair) Now() time.Time { return c.now.Now() }
func (c clockPair) AfterFunc(d time.Duration, f func()) func() bool {
	return c.timers.AfterFunc(d, f)
}

// Defect 5: a debt longer than the largest Duration overflowed to a
// negative wait that counted as "fits": 3 grants at one instant with Burst 1.
func TestHugeDebtDoesNotFit(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Unix(1_780_000_000, 0))
	l := newLimiter(t, tokenbucket.Config{Rate: 1e-9, Burst: 1, Queue: ratelimit.Queue{Limit: 16, Order: ratelimit.NewestFirst}}, clock)
	mustAcquire(t, l, 1)
	granted := 0
	var chans []chan answer
	for i := 0; i < 9; i++ {
		ch := make(chan answer, 1)
		go func() {
			lease, err := l.Wait(bg, 1)
			ch <- answer{lease, err}
		}()
		chans = append(chans, ch)
	}
	// Each Wait is queued or refused at once (its wait is past Far).
	deadline := time.Now().Add(5 * time.Second)
	for answered := 0; ; {
		answered = 0
		for _, ch := range chans {
			answered += len(ch)
		}
		if int64(answered)+l.Stats().Queued == 9 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if lease := mustAcquire(t, l, 1); lease.Acquired() {
		granted++
	}
	if granted != 0 {
		t.Fatalf("Acquire(1) granted with Burst 1 spent and reservations in debt")
	}
	l.Close()
	for _, ch := range chans {
		if a := <-ch; a.err == nil && a.lease.Acquired() {
			t.Fatalf("a Wait was granted: %v", a.lease)
		}
	}
}

// Defect 6: Wait's deadline check used a figure 1ns longer than Acquire's
// RetryAfter. Rate 5, Burst 5: a Wait whose deadline is exactly
// RetryAfter away is accepted.
func TestWaitDeadlineUsesAcquiresFigure(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 5, Burst: 5, Queue: ratelimit.Queue{Limit: 5}}, clock)
	mustAcquire(t, l, 5)
	clock.Advance(7 * time.Millisecond)
	refused := mustAcquire(t, l, 1)
	d, ok := refused.RetryAfter()
	if refused.Acquired() || !ok || d != 192999999 {
		t.Fatalf("Acquire(1) at +7ms: %v, want refused with RetryAfter 192999999ns", refused)
	}
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(d))
	defer cancel()
	ch := goWait(t, l, ctx, 1, 1)
	clock.Advance(d)
	if a := <-ch; a.err != nil || !a.lease.Acquired() {
		t.Fatalf("Wait with a deadline RetryAfter away: %v, %v; want granted at RetryAfter", a.lease, a.err)
	}
}

// Defect 7: a cancelled waiter left the waiters behind it at their old
// turn, so a newcomer that announced 200ms was granted at 300ms.
func TestCancelMovesLaterReservationsForward(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 10, Burst: 2, Queue: ratelimit.Queue{Limit: 10}}, clock)
	mustAcquire(t, l, 2)
	ctx1, cancel1 := context.WithCancel(bg)
	w1 := goWait(t, l, ctx1, 2, 2)
	w2 := goWait(t, l, bg, 1, 3)
	cancel1()
	if a := <-w1; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v, %v", a.lease, a.err)
	}
	ctx3, cancel3 := context.WithDeadline(bg, clock.Now().Add(250*time.Millisecond))
	defer cancel3()
	w3 := goWait(t, l, ctx3, 1, 2)
	clock.Advance(100 * time.Millisecond)
	if a := <-w2; !a.lease.Acquired() {
		t.Fatalf("the earlier waiter at +100ms: %v, %v; want granted (its turn moved forward)", a.lease, a.err)
	}
	clock.Advance(100 * time.Millisecond)
	granted(t, w3, "the newcomer at +200ms, the turn it announced")
}

// Defect 8: an Acquire refused behind a queue kept the tokens (or window
// permits) its inner decision took.
func TestRefusalBehindQueueTakesNothing(t *testing.T) {
	for _, cfg := range []ratelimit.Config{
		fixedwindow.Config{Limit: 3, Window: time.Second, Queue: ratelimit.Queue{Limit: 3}},
		slidingwindow.Config{Limit: 3, Window: time.Second, Segments: 4, Queue: ratelimit.Queue{Limit: 3}},
		slidinglog.Config{Limit: 3, Window: time.Second, Queue: ratelimit.Queue{Limit: 3}},
	} {
		clock := ratelimittest.NewClock()
		l := newLimiter(t, cfg, clock)
		mustAcquire(t, l, 1)
		w := goWait(t, l, bg, 3, 3) // 2 available: it queues
		before := l.Stats().Available
		for i := 0; i < 3; i++ {
			if lease := mustAcquire(t, l, 1); lease.Acquired() {
				t.Fatalf("%T: Acquire(1) overtook the queue", cfg)
			} else if _, ok := lease.RetryAfter(); !ok {
				t.Fatalf("%T: refusal behind the queue without RetryAfter", cfg)
			}
		}
		if after := l.Stats().Available; after != before {
			t.Fatalf("%T: refusals behind the queue changed Available from %d to %d", cfg, before, after)
		}
		clock.Advance(time.Second)
		if a := <-w; !a.lease.Acquired() {
			t.Fatalf("%T: the queued Wait(3): %v", cfg, a.lease)
		}
	}
}

// Defect 8, token bucket: at the instant Acquire grants, a reservation
// due 1ns later left a token that a refused Acquire behind the queue took.
func TestRefusalBehindReservationTakesNothing(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 5, Burst: 5, Queue: ratelimit.Queue{Limit: 5}}, clock)
	mustAcquire(t, l, 5)
	clock.Advance(7 * time.Millisecond)
	d, _ := mustAcquire(t, l, 1).RetryAfter()
	w := goWait(t, l, bg, 1, 1)
	clock.Advance(d)
	refused := mustAcquire(t, l, 1)
	if refused.Acquired() {
		t.Fatalf("Acquire(1) overtook the waiter: %v", refused)
	}
	if _, ok := refused.RetryAfter(); !ok {
		t.Fatalf("refusal without RetryAfter: %v", refused)
	}
	granted(t, w, "the waiter at its turn (a refusal behind it must not take its token)")
}

// Defect 9: the queue-full RetryAfter of a window did not count the
// permits queued ahead beyond the current window.
func TestQueueFullRetryAfterCountsQueueAhead(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 1, Window: time.Millisecond, Queue: ratelimit.Queue{Limit: 1}}, clock)
	mustAcquire(t, l, 1)
	w := goWait(t, l, bg, 1, 1)
	refused, _ := l.Wait(bg, 1)
	d, ok := refused.RetryAfter()
	if refused.Acquired() || refused.Reason() != ratelimit.ReasonQueueFull || !ok || d != 2*time.Millisecond {
		t.Fatalf("Wait(1) behind a full queue: %v, want refused (queue full) with RetryAfter 2ms", refused)
	}
	clock.Advance(time.Millisecond)
	if a := <-w; !a.lease.Acquired() {
		t.Fatalf("queued Wait: %v", a.lease)
	}
	if again := mustAcquire(t, l, 1); again.Acquired() {
		t.Fatalf("at +1ms the queued waiter has the window: Acquire granted")
	}
	clock.Advance(time.Millisecond)
	if again := mustAcquire(t, l, 1); !again.Acquired() {
		t.Fatalf("Acquire(1) at the announced RetryAfter: %v, want granted", again)
	}
}

// Defect 10: an Acquire refused behind an OldestFirst queue was not counted.
func TestRefusalBehindQueueIsCounted(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 1, Window: time.Second, Queue: ratelimit.Queue{Limit: 1}}, clock)
	mustAcquire(t, l, 1)
	w := goWait(t, l, bg, 1, 1)
	mustAcquire(t, l, 1)
	if s := l.Stats(); s.Granted != 1 || s.Refused != 1 {
		t.Fatalf("Stats = %+v, want 1 granted, 1 refused", s)
	}
	l.Close()
	<-w
}

// Defect 13: a cancelled context was granted (and took a permit) by
// memory's Acquire; every backend returns ctx.Err() and takes nothing.
// Defect 14: a nil context panicked.
func TestContextChecked(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, clock)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := l.Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled ctx: %v, want context.Canceled", err)
	}
	//lint:ignore SA1012 a nil context is the input under test
	if _, err := l.Acquire(nil, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Fatalf("Acquire(nil, 1): %v, want ErrNilContext", err)
	}
	//lint:ignore SA1012 a nil context is the input under test
	if _, err := l.Wait(nil, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Fatalf("Wait(nil, 1): %v, want ErrNilContext", err)
	}
	if s := l.Stats(); s.Available != 1 || s.Granted+s.Refused != 0 {
		t.Fatalf("Stats after refused calls = %+v, want nothing taken or counted", s)
	}
}

// Defect 14: a typed nil config panicked.
func TestTypedNilConfig(t *testing.T) {
	for _, cfg := range []ratelimit.Config{(*fixedwindow.Config)(nil), (*tokenbucket.Config)(nil), (*slidingwindow.Config)(nil), (*slidinglog.Config)(nil), (*concurrency.Config)(nil)} {
		if l, err := memory.New(cfg); l != nil || !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("New(%T(nil)) = %v, %v; want ErrInvalidConfig", cfg, l, err)
		}
		if f, err := memory.NewFactory(cfg); f != nil || !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("NewFactory(%T(nil)) = %v, %v; want ErrInvalidConfig", cfg, f, err)
		}
	}
}

// Refund (for Chain's rollback) gives a grant back as if never made, and
// wakes a waiter it lets through.
func TestRefund(t *testing.T) {
	for _, cfg := range []ratelimit.Config{
		tokenbucket.Config{Rate: 1, Burst: 2, Queue: ratelimit.Queue{Limit: 2}},
		fixedwindow.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 2}},
		slidingwindow.Config{Limit: 2, Window: time.Second, Segments: 2, Queue: ratelimit.Queue{Limit: 2}},
		slidingwindow.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 2}},
		slidinglog.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 2}},
		concurrency.Config{Limit: 2, Queue: ratelimit.Queue{Limit: 2}},
	} {
		clock := ratelimittest.NewClock()
		l := newLimiter(t, cfg, clock)
		g := mustAcquire(t, l, 2)
		w := goWait(t, l, bg, 1, 1)
		if err := l.Refund(bg, g, 2); err != nil {
			t.Fatalf("%T: Refund: %v", cfg, err)
		}
		if a := <-w; !a.lease.Acquired() {
			t.Fatalf("%T: the waiter after a refund: %v", cfg, a.lease)
		}
		if s := l.Stats(); s.Available != 1 {
			t.Fatalf("%T: Available after the refund and the waiter's grant = %d, want 1", cfg, s.Available)
		}
		other := newLimiter(t, cfg, clock)
		foreign := mustAcquire(t, other, 1)
		l.Refund(bg, foreign, 1)
		if s := l.Stats(); s.Available != 1 {
			t.Fatalf("%T: a refund of another limiter's lease changed Available to %d", cfg, s.Available)
		}
	}
}

// After a NewestFirst eviction the remaining reservations move forward:
// Rate 1, Burst 1, Queue{3, NewestFirst}: A, B, C wait; D evicts A; B is
// served at 1s (it was due at 2s behind A).
func TestEvictionMovesReservationsForward(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 1, Burst: 1, Queue: ratelimit.Queue{Limit: 3, Order: ratelimit.NewestFirst}}, clock)
	mustAcquire(t, l, 1)
	a := goWait(t, l, bg, 1, 1)
	b := goWait(t, l, bg, 1, 2)
	c := goWait(t, l, bg, 1, 3)
	d := make(chan answer, 1)
	go func() {
		lease, err := l.Wait(bg, 1)
		d <- answer{lease, err}
	}()
	if r := <-a; r.lease.Reason() != ratelimit.ReasonEvicted {
		t.Fatalf("A: %v, %v; want evicted", r.lease, r.err)
	}
	for l.Stats().Queued != 3 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(time.Second)
	granted(t, b, "B at 1s (the eviction's tokens must move it forward)")
	clock.Advance(2 * time.Second)
	<-c
	<-d
}

// A flood of refusals behind an unchanged queue costs no allocation: the
// answer is replayed once per change of the queue, not copied per refusal.
func TestRefusalsBehindQueueDoNotAllocate(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, slidinglog.Config{Limit: 1000, Window: time.Second, Queue: ratelimit.Queue{Limit: 1000}}, clock)
	for i := 0; i < 1000; i++ {
		clock.Advance(time.Microsecond)
		mustAcquire(t, l, 1)
	}
	w := goWait(t, l, bg, 1, 1)
	first := mustAcquire(t, l, 1)
	allocs := testing.AllocsPerRun(100, func() {
		if lease := mustAcquire(t, l, 1); lease.Acquired() {
			t.Fatalf("refusal behind the queue: %v", lease)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per refusal behind an unchanged queue, want 0", allocs)
	}
	d1, _ := first.RetryAfter()
	again := mustAcquire(t, l, 1)
	if d2, _ := again.RetryAfter(); d2 != d1 {
		t.Fatalf("RetryAfter behind the same queue at the same instant: %v then %v", d1, d2)
	}
	clock.Advance(time.Second)
	<-w
}
