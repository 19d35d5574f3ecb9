package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
)

func TestFromRate(t *testing.T) {
	l := ratelimit.FromRate(rate.NewLimiter(10, 2))
	for i := 0; i < 2; i++ {
		if g, err := l.Acquire(bg, 1); err != nil || !g.Acquired() || g.Limit() != 2 {
			t.Fatalf("Acquire %d: %v, %v; want granted", i, g, err)
		}
	}
	r, err := l.Acquire(bg, 1)
	if d, ok := r.RetryAfter(); err != nil || r.Acquired() || !ok || d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("third Acquire: %v, %v; want refused with RetryAfter in (0, 100ms]", r, err)
	}
	if _, err := l.Acquire(bg, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatalf("Acquire(-1): %v", err)
	}
	if _, err := l.Wait(bg, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Wait(3): %v", err)
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond) // the 2 tokens are about 200ms away
	defer cancel()
	if w, err := l.Wait(ctx, 2); err != nil || w.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with 30ms left: %v, %v; want ReasonDeadline at once", w, err)
	}
	if w, err := l.Wait(bg, 1); err != nil || !w.Acquired() {
		t.Fatalf("Wait(1): %v, %v; want granted after about 100ms", w, err)
	}
	inf := ratelimit.FromRate(rate.NewLimiter(rate.Inf, 0))
	if g, err := inf.Acquire(bg, 1000); err != nil || !g.Acquired() || g.Limit() != -1 || g.Remaining() != -1 {
		t.Fatalf("rate.Inf: %v, %v; want granted, with no limit (-1)", g, err)
	}
}

// Leases carry the burst of their decision, also after SetBurst, and cost no
// allocation while it stays the same.
func TestFromRateLeases(t *testing.T) {
	rl := rate.NewLimiter(1e9, 2)
	l := ratelimit.FromRate(rl)
	if g, _ := l.Acquire(bg, 1); g.Limit() != 2 {
		t.Fatalf("Limit = %d, want 2", g.Limit())
	}
	if n := testing.AllocsPerRun(100, func() { l.Acquire(bg, 1) }); n != 0 {
		t.Errorf("Acquire: %v allocations", n)
	}
	rl.SetBurst(5)
	if g, _ := l.Acquire(bg, 1); g.Limit() != 5 {
		t.Errorf("after SetBurst(5), Limit = %d", g.Limit())
	}
}

// TestFromRateInvalidCalls: a nil or done ctx is reported before anything
// is taken, and a nil *rate.Limiter is an invalid config, not a panic.
func TestFromRateInvalidCalls(t *testing.T) {
	rl := rate.NewLimiter(1e-3, 2) // nothing comes back during the test
	l := ratelimit.FromRate(rl)
	checkBadContexts(t, l)
	if g, err := l.Acquire(bg, 2); err != nil || !g.Acquired() {
		t.Fatalf("Acquire(2) after the invalid calls: %v, %v; want the whole burst, untouched", g, err)
	}
	nilLimiter := ratelimit.FromRate(nil)
	if _, err := nilLimiter.Acquire(bg, 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("FromRate(nil).Acquire: %v, want ErrInvalidConfig", err)
	}
	if _, err := nilLimiter.Wait(bg, 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("FromRate(nil).Wait: %v, want ErrInvalidConfig", err)
	}
}

// TestFromRateStatusCheck: permits == 0 takes nothing and asks for one
// token: Acquire refuses with the time until it comes, Wait waits for it
// (and refuses at once when the deadline is too close), and an infinite
// limit grants it.
func TestFromRateStatusCheck(t *testing.T) {
	l := ratelimit.FromRate(rate.NewLimiter(10, 1))
	if g, err := l.Acquire(bg, 0); err != nil || !g.Acquired() {
		t.Fatalf("status check on a full bucket: %v, %v", g, err)
	}
	l.Acquire(bg, 1)
	r, err := l.Acquire(bg, 0)
	if d, ok := r.RetryAfter(); err != nil || r.Acquired() || !ok || d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("status check on an empty bucket: %v, %v; want refused with RetryAfter in (0, 100ms]", r, err)
	}
	ctx, cancel := context.WithTimeout(bg, time.Millisecond)
	defer cancel()
	if w, err := l.Wait(ctx, 0); err != nil || w.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait(0) with 1ms left on an empty bucket: %v, %v; want ReasonDeadline", w, err)
	}
	if w, err := l.Wait(bg, 0); err != nil || !w.Acquired() {
		t.Fatalf("Wait(0): %v, %v; want granted once a token is there", w, err)
	}
	if g, err := l.Acquire(bg, 1); err != nil || !g.Acquired() {
		t.Fatalf("Acquire(1) after Wait(0): %v, %v; want the token Wait(0) waited for, untaken", g, err)
	}
	inf := ratelimit.FromRate(rate.NewLimiter(rate.Inf, 0))
	for _, call := range []func(context.Context, int) (ratelimit.Lease, error){inf.Acquire, inf.Wait} {
		if g, err := call(bg, 0); err != nil || !g.Acquired() {
			t.Fatalf("status check on rate.Inf: %v, %v; want granted", g, err)
		}
	}
}

// TestFromRateIdleFor: a wrapped *rate.Limiter is idle when its bucket is
// full, for as long as it has not been called through the wrapper.
func TestFromRateIdleFor(t *testing.T) {
	l := ratelimit.FromRate(rate.NewLimiter(1, 2)).(interface{ IdleFor() (time.Duration, bool) })
	if _, ok := l.IdleFor(); !ok {
		t.Fatal("a full bucket is not idle")
	}
	if lease, err := l.(ratelimit.Limiter).Acquire(context.Background(), 1); err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	if _, ok := l.IdleFor(); ok {
		t.Fatal("idle with a token taken")
	}
	inf := ratelimit.FromRate(rate.NewLimiter(rate.Inf, 0)).(interface{ IdleFor() (time.Duration, bool) })
	time.Sleep(2 * time.Millisecond)
	if d, ok := inf.IdleFor(); !ok || d <= 0 {
		t.Fatalf("rate.Inf, unused: IdleFor = %v, %v; want idle for a while", d, ok)
	}
	if _, ok := ratelimit.FromRate(nil).(interface{ IdleFor() (time.Duration, bool) }).IdleFor(); ok {
		t.Fatal("FromRate(nil) reports idle")
	}
}
