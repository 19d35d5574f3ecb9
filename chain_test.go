package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
)

func newMem(t *testing.T, cfg ratelimit.Config, clock *ratelimittest.Clock) memory.Limiter {
	t.Helper()
	l, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var bg = context.Background()

func TestChainAllOrNothing(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, concurrency.Config{Limit: 2}, clock)
	b := newMem(t, concurrency.Config{Limit: 1}, clock)
	c := ratelimit.Chain(a, b)
	first, err := c.Acquire(bg, 1)
	if err != nil || !first.Acquired() || first.Remaining() != 0 || first.Limit() != 1 {
		t.Fatalf("first Acquire: %v, %v; want granted with b's figures (0 of 1 left)", first, err)
	}
	second, err := c.Acquire(bg, 1)
	if err != nil || second.Acquired() || second.Reason() != ratelimit.ReasonLimit || second.Limit() != 1 {
		t.Fatalf("second Acquire: %v, %v; want b's refusal", second, err)
	}
	if got := a.Stats().Available; got != 1 {
		t.Fatalf("a has %d available after the chain's refusal, want 1 (its permit given back)", got)
	}
	first.Release()
	first.Release()
	if a.Stats().Available != 2 || b.Stats().Available != 1 {
		t.Fatalf("after Release: a %+v, b %+v; want both full", a.Stats(), b.Stats())
	}
	if _, err := c.Acquire(bg, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Acquire(3): %v, want ErrExceedsLimit from a", err)
	}
	if _, err := ratelimit.Chain().Acquire(bg, 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("empty chain: %v, want ErrInvalidConfig", err)
	}
}

// TestChainWaitHoldsNothingWhileSleeping: while the chain sleeps on the rate
// limiter, the concurrency limiter's permit is not held.
func TestChainWaitHoldsNothingWhileSleeping(t *testing.T) {
	clock := ratelimittest.NewClock()
	conc := newMem(t, concurrency.Config{Limit: 1}, clock)
	win := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Second}, clock)
	if l, _ := win.Acquire(bg, 1); !l.Acquired() {
		t.Fatal("setup: window not granted")
	}
	c := ratelimit.Chain(conc, win).WithClock(clock)
	done := make(chan ratelimit.Lease, 1)
	go func() {
		l, err := c.Wait(bg, 1)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	for clock.Pending() == 0 { // the chain is asleep on the clock
		time.Sleep(50 * time.Microsecond)
	}
	if got := conc.Stats().Available; got != 1 {
		t.Fatalf("concurrency permit held while sleeping: %d available, want 1", got)
	}
	clock.Advance(time.Second)
	lease := <-done
	if !lease.Acquired() || conc.Stats().Available != 0 || win.Stats().Available != 0 {
		t.Fatalf("after the window: %v, conc %+v, win %+v; want granted by both", lease, conc.Stats(), win.Stats())
	}
	lease.Release()
	if conc.Stats().Available != 1 {
		t.Fatalf("Release did not give the concurrency permit back")
	}
}

func TestChainWaitDeadlineAndConcurrency(t *testing.T) {
	clock := ratelimittest.NewClock()
	win := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Second}, clock)
	win.Acquire(bg, 1)
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Millisecond))
	defer cancel()
	lease, err := ratelimit.Chain(win).WithClock(clock).Wait(ctx, 1)
	if err != nil || lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with a 1ms deadline: %v, %v; want a ReasonDeadline refusal", lease, err)
	}
	if d, ok := lease.RetryAfter(); !ok || d != time.Second {
		t.Fatalf("RetryAfter = %v, %v; want 1s", d, ok)
	}

	conc := newMem(t, concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, clock)
	held, _ := conc.Acquire(bg, 1)
	done := make(chan ratelimit.Lease, 1)
	go func() {
		l, _ := ratelimit.Chain(conc).Wait(bg, 1)
		done <- l
	}()
	for conc.Stats().Queued == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	held.Release()
	if l := <-done; !l.Acquired() {
		t.Fatalf("chain Wait on a concurrency limiter: %v, want granted after Release", l)
	}
}
