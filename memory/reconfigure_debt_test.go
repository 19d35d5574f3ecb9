package memory_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

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
