package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
	"github.com/limitkit/ratelimit/waittrace"
)

var bg = context.Background()

func newLimiter(t *testing.T, cfg ratelimit.Config, clock *ratelimittest.Clock) memory.Limiter {
	t.Helper()
	return factory(t, cfg, clock).(memory.Limiter)
}

type answer struct {
	lease ratelimit.Lease
	err   error
}

// goWait starts Wait and returns once Stats shows queued permits in all.
func goWait(t *testing.T, l memory.Limiter, ctx context.Context, permits int, queued int64) chan answer {
	t.Helper()
	ch := make(chan answer, 1)
	go func() {
		lease, err := l.Wait(ctx, permits)
		ch <- answer{lease, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); l.Stats().Queued != queued; {
		if time.Now().After(deadline) {
			t.Fatalf("Wait(%d) not queued", permits)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return ch
}

// granted fails the test unless the Wait answering on ch returns a granted
// lease within 5 seconds; what names the waiter in the failure.
func granted(t *testing.T, ch <-chan answer, what string) {
	t.Helper()
	select {
	case a := <-ch:
		if !a.lease.Acquired() {
			t.Fatalf("%s: %v, %v; want granted", what, a.lease, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not granted within 5s", what)
	}
}

func TestOneTimerPerLimiter(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 5, Window: time.Second, Queue: ratelimit.Queue{Limit: 50}}, clock)
	l.Acquire(bg, 5)
	var waiters []chan answer
	for i := 1; i <= 10; i++ {
		waiters = append(waiters, goWait(t, l, bg, 1, int64(i)))
	}
	if n := clock.Pending(); n != 1 {
		t.Fatalf("%d timers set for 10 waiters, want 1", n)
	}
	clock.Advance(time.Second) // five served at the window's start
	clock.Advance(time.Second) // and five more
	for i, w := range waiters {
		if a := <-w; !a.lease.Acquired() {
			t.Fatalf("waiter %d: %v %v", i, a.lease, a.err)
		}
	}
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d timers left with an empty queue, want 0", n)
	}
}

// TestNoOvertaking: with OldestFirst, a free permit is not taken by a new
// request while an older waiter needs more; with NewestFirst it is.
func TestNoOvertaking(t *testing.T) {
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		clock := ratelimittest.NewClock()
		l := newLimiter(t, slidinglog.Config{Limit: 3, Window: time.Second, Queue: ratelimit.Queue{Limit: 2, Order: order}}, clock)
		l.Acquire(bg, 1)
		clock.Advance(100 * time.Millisecond)
		l.Acquire(bg, 2)
		w := goWait(t, l, bg, 2, 2)
		clock.Advance(900 * time.Millisecond) // the first permit is back; the waiter needs two
		if s := l.Stats(); s.Available != 1 || s.Queued != 2 {
			t.Fatalf("%v: %+v, want 1 available and the waiter queued", order, s)
		}
		lease, err := l.Acquire(bg, 1)
		if err != nil || lease.Acquired() != (order == ratelimit.NewestFirst) {
			t.Fatalf("%v: Acquire(1) beside a waiter = %v, %v", order, lease, err)
		}
		if order == ratelimit.OldestFirst {
			// RetryAfter counts the queue ahead: 2+1 permits are back at T0+1.1s.
			if d, ok := lease.RetryAfter(); !ok || d != 100*time.Millisecond {
				t.Fatalf("RetryAfter behind the queue = %v, %v; want 100ms", d, ok)
			}
			clock.Advance(100 * time.Millisecond)
			if a := <-w; !a.lease.Acquired() {
				t.Fatalf("waiter: %v %v", a.lease, a.err)
			}
		}
		l.Close()
	}
}

// TestCancelledHeadLetsNextThrough: when the first waiter gives up, the ones
// behind it that fit are served at once.
func TestCancelledHeadLetsNextThrough(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, concurrency.Config{Limit: 3, Queue: ratelimit.Queue{Limit: 4}}, clock)
	one, _ := l.Acquire(bg, 1)
	l.Acquire(bg, 2)
	ctx, cancel := context.WithCancel(bg)
	a := goWait(t, l, ctx, 3, 3)
	b := goWait(t, l, bg, 1, 4)
	one.Release() // one permit back: a needs three, and b may not overtake it
	if s := l.Stats(); s.Available != 1 || s.Queued != 4 {
		t.Fatalf("after Release: %+v, want 1 available, both waiting", s)
	}
	cancel()
	if r := <-a; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a: %v %v, want context.Canceled", r.lease, r.err)
	}
	if r := <-b; !r.lease.Acquired() {
		t.Fatalf("b: %v %v, want granted once a left the queue", r.lease, r.err)
	}
}

// TestStatusChecksAreNotCounted: Acquire(0) and Wait(0) report availability
// without counting as granted or refused requests.
func TestStatusChecksAreNotCounted(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 1, Window: time.Second, Queue: ratelimit.Queue{Limit: 1}}, clock)
	l.Acquire(bg, 1)
	// Wait(0) waits for a permit; a deadline before the window's end is
	// refused at once.
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Millisecond))
	defer cancel()
	for i := 0; i < 3; i++ {
		if a, _ := l.Acquire(bg, 0); a.Acquired() {
			t.Fatal("status check granted on an exhausted limiter")
		}
		if w, _ := l.Wait(ctx, 0); w.Acquired() || w.Reason() != ratelimit.ReasonDeadline {
			t.Fatalf("Wait(0) with a deadline before the window's end: %v, want refused (deadline)", w)
		}
	}
	if s := l.Stats(); s.Granted != 1 || s.Refused != 0 {
		t.Fatalf("Stats = %+v, want 1 granted and no refusal counted for status checks", s)
	}
}

// TestWaitRefusalKeepsWindowMoves: a Wait refused at once still keeps what
// its decision dropped from the window (a segment that left it), so later
// decisions count only the permits still inside.
func TestWaitRefusalKeepsWindowMoves(t *testing.T) {
	clock := ratelimittest.NewClock()
	// Queue.Limit 1: the Wait of 2 below is refused at once.
	l := newLimiter(t, slidingwindow.Config{Limit: 2, Window: time.Second, Segments: 2, Queue: ratelimit.Queue{Limit: 1}}, clock)
	steps := []struct {
		at   time.Duration
		wait bool
		n    int
		want bool
	}{
		{0, false, 1, true},                       // first segment
		{600 * time.Millisecond, false, 1, true},  // second segment: the limit is reached
		{1100 * time.Millisecond, true, 2, false}, // the first segment left: 1 free, 2 asked
		{1200 * time.Millisecond, false, 1, true}, // 1 free
		{1300 * time.Millisecond, false, 1, false},
	}
	for i, s := range steps {
		clock.Set(ratelimittest.Start.Add(s.at))
		var lease ratelimit.Lease
		if s.wait {
			lease, _ = l.Wait(bg, s.n)
		} else {
			lease, _ = l.Acquire(bg, s.n)
		}
		if lease.Acquired() != s.want {
			t.Fatalf("step %d at %v: %v, want granted %v", i, s.at, lease, s.want)
		}
	}
}

// With the only waiter gone (cancelled), the limiter's timer is stopped:
// nothing is left for it to serve, and a far-off timer kept it alive.
func TestTimerStopsWithTheLastWaiter(t *testing.T) {
	clock := ratelimittest.NewClock()
	l, err := memory.New(tokenbucket.Config{Rate: 1.0 / 3600, Burst: 1}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Acquire(context.Background(), 1)
	queued := make(chan struct{})
	ctx, cancel := context.WithCancel(waittrace.WithHooks(context.Background(), &waittrace.Hooks{
		Queued: func(context.Context, int) { close(queued) },
	}))
	done := make(chan error, 1)
	go func() { _, err := l.Wait(ctx, 1); done <- err }()
	<-queued
	if n := clock.Pending(); n != 1 {
		t.Fatalf("%d timers while a waiter is queued, want 1", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d timers armed with no waiter left", n)
	}
}

// A status check (Wait of 0 permits) queues whatever the queue limit, also
// when a Reconfigure lowered the limit below what is queued: it is not
// refused (OldestFirst) and makes no waiter go (NewestFirst).
func TestStatusCheckQueuesOverALoweredLimit(t *testing.T) {
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		clock := ratelimittest.NewClock()
		cfg := tokenbucket.Config{Rate: 1, Burst: 10, Queue: ratelimit.Queue{Limit: 10, Order: order}}
		l, err := memory.New(cfg, memory.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		l.Acquire(context.Background(), 10)
		res := make(chan ratelimit.Lease, 2)
		for i := range 2 {
			queued := make(chan struct{})
			ctx := waittrace.WithHooks(context.Background(), &waittrace.Hooks{Queued: func(context.Context, int) { close(queued) }})
			go func() { g, _ := l.Wait(ctx, 5); res <- g }()
			<-queued
			if q := l.Stats().Queued; q != int64(5*(i+1)) {
				t.Fatalf("%v: %d queued", order, q)
			}
		}
		cfg.Queue.Limit = 4
		if err := control.Reconfigure(l, cfg); err != nil {
			t.Fatal(err)
		}
		queued := make(chan struct{})
		ctx, cancel := context.WithCancel(waittrace.WithHooks(context.Background(), &waittrace.Hooks{Queued: func(context.Context, int) { close(queued) }}))
		sc := make(chan error, 1)
		go func() {
			g, err := l.Wait(ctx, 0)
			if err == nil {
				err = fmt.Errorf("answered %v (%v)", g, g.Reason())
			}
			sc <- err
		}()
		select {
		case <-queued:
		case err := <-sc:
			t.Fatalf("%v: the status check did not queue: %v", order, err)
		}
		if q := l.Stats().Queued; q != 10 {
			t.Fatalf("%v: %d queued after the status check, want the 10 still there", order, q)
		}
		cancel()
		if err := <-sc; !errors.Is(err, context.Canceled) {
			t.Fatalf("%v: the status check: %v", order, err)
		}
		if len(res) != 0 {
			t.Fatalf("%v: a waiter was answered: %v", order, <-res)
		}
		l.Close()
	}
}

// A waiter whose due instant came earlier when tokens came back (a waiter
// ahead of it cancelled) keeps that instant when a settlement then charges
// the bucket: the instant it was told, or an earlier one, always holds.
func TestCancelThenChargeKeepsTheEarlierTurn(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 1, Burst: 4, Queue: ratelimit.Queue{Limit: 10}}, clock)
	r, err := control.Reserve(bg, l, 1)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(1): %v, %v", r, err)
	}
	mustAcquire(t, l, 3)        // the bucket is empty
	a := goWait(t, l, bg, 1, 1) // due at 1s
	ctx, cancel := context.WithCancel(bg)
	goWait(t, l, ctx, 2, 3)     // due at 3s
	c := goWait(t, l, bg, 1, 4) // due at 4s
	cancel()                    // c's turn comes at 2s now
	for l.Stats().Queued != 2 {
		time.Sleep(50 * time.Microsecond)
	}
	if err := control.Settle(bg, l, r, 3); err != nil { // 2 permits more: the bucket owes 2 more
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	granted(t, a, "the first waiter at 1s")
	clock.Advance(time.Second)
	granted(t, c, "the last waiter at 2s, the turn it had before the charge")
}

// A reservation whose tokens would come too far ahead is refused at once,
// with the instant they would come (not zero), however many wait before it.
func TestFarReservationRefusalTellsWhen(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, tokenbucket.Config{Rate: 1e-9, Burst: 1, Queue: ratelimit.Queue{Limit: 16}}, clock)
	mustAcquire(t, l, 1)
	for i := 1; i <= 16; i++ {
		ch := make(chan answer, 1)
		go func() {
			lease, err := l.Wait(bg, 1)
			ch <- answer{lease, err}
		}()
		for deadline := time.Now().Add(5 * time.Second); l.Stats().Queued != int64(i) && len(ch) == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("Wait %d neither queued nor answered", i)
			}
			time.Sleep(50 * time.Microsecond)
		}
		if len(ch) == 0 {
			continue
		}
		a := <-ch
		if d, ok := a.lease.RetryAfter(); a.err != nil || a.lease.Acquired() || !ok || d < time.Hour {
			t.Fatalf("Wait %d refused: %v, %v, RetryAfter %v/%v; want refused, when its tokens come", i, a.lease, a.err, d, ok)
		}
		return
	}
	t.Fatal("16 reservations of a token a billion seconds apart all queued")
}
