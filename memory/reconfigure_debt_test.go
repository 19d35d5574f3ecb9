package memory_test

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// A token bucket in debt to a queued reservation keeps the debt on Reconfigure:
// Burst 5 and 5s at 1/s allow 10 in 5s, reconfigured or not.
func TestReconfigureKeepsDebt(t *testing.T) {
	for _, change := range []bool{false, true} {
		clock := ratelimittest.NewClock()
		cfg := tokenbucket.Config{Rate: 1, Burst: 5}
		l := newLimiter(t, cfg, clock)
		granted := 0
		if mustAcquire(t, l, 5).Acquired() {
			granted += 5
		}
		w := goWait(t, l, bg, 5, 5)
		if change {
			cfg2 := cfg
			cfg2.Queue = ratelimit.Queue{Limit: 100} // only the queue bound changes
			reconfigure(t, l, cfg2)
		}
		clock.Advance(5 * time.Second)
		if a := <-w; a.lease.Acquired() {
			granted += 5
		}
		if mustAcquire(t, l, 5).Acquired() {
			granted += 5
		}
		if granted > 10 {
			t.Errorf("reconfigured=%v: over-admission: %d > 10", change, granted)
		}
	}
}

// A token bucket reconfigured to rate.Inf and back keeps its debt to a
// queued reservation: rate.Inf reads no state, and the bucket it kept goes
// on under the next configuration. Burst 5 and 5s at 1/s allow 10 in 5s.
// Meanwhile rate.Inf grants everything, the reservation queued before it
// notwithstanding.
func TestReconfigureKeepsDebtThroughInf(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 1, Burst: 5}
	l := newLimiter(t, cfg, clock)
	granted := 0
	if mustAcquire(t, l, 5).Acquired() {
		granted += 5
	}
	w := goWait(t, l, bg, 5, 5)
	reconfigure(t, l, tokenbucket.Config{Rate: rate.Inf, Burst: 5})
	if g := mustAcquire(t, l, 3); !g.Acquired() || g.Limit() != -1 {
		t.Errorf("Acquire under rate.Inf, a reservation queued: %v; want granted, no limit", g)
	}
	reconfigure(t, l, cfg)
	clock.Advance(5 * time.Second)
	if a := <-w; a.lease.Acquired() {
		granted += 5
	}
	if mustAcquire(t, l, 5).Acquired() {
		granted += 5
	}
	if granted > 10 {
		t.Errorf("over-admission through rate.Inf: %d > 10", granted)
	}
}
