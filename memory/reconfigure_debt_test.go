package memory_test

import (
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
