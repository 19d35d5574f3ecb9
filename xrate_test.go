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
	ctx, cancel := context.WithTimeout(bg, time.Millisecond)
	defer cancel()
	if w, err := l.Wait(ctx, 2); err != nil || w.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with 1ms left: %v, %v; want ReasonDeadline at once", w, err)
	}
	if w, err := l.Wait(bg, 1); err != nil || !w.Acquired() {
		t.Fatalf("Wait(1): %v, %v; want granted after about 100ms", w, err)
	}
	inf := ratelimit.FromRate(rate.NewLimiter(rate.Inf, 0))
	if g, err := inf.Acquire(bg, 1000); err != nil || !g.Acquired() {
		t.Fatalf("rate.Inf: %v, %v; want granted", g, err)
	}
}

// Leases carry the burst of their decision, also after SetBurst, and cost no
// allocation while it stays the same.
func TestFromRateLeases(t *testing.T) {
	rl := rate.NewLimiter(rate.Inf, 2)
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
