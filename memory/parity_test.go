package memory_test

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestParityWithXTimeRate: x/time/rate is the oracle. Over 10,000 random
// sequences of rates, bursts, permits and gaps, the continuous token bucket
// grants exactly what rate.Limiter.AllowN grants at the same instants.
func TestParityWithXTimeRate(t *testing.T) {
	const sequences, steps = 10_000, 40
	rng := rand.New(rand.NewSource(42))
	ctx := context.Background()
	var grants, refusals int
	for seq := 0; seq < sequences; seq++ {
		var r float64
		switch rng.Intn(3) {
		case 0:
			r = float64(1 + rng.Intn(1000)) // whole rates
		case 1:
			r = rng.Float64() * 100 // fractional, some tiny
		default:
			r = rng.ExpFloat64() * 1e4 // fast
		}
		if r < 0.01 {
			r = 0.01
		}
		burst := 1 + rng.Intn(20)
		clock := ratelimittest.NewClock()
		clock.Advance(time.Duration(rng.Int63n(int64(time.Hour))))
		ours, err := memory.New(tokenbucket.Config{Rate: rate.Limit(r), Burst: burst}, memory.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		oracle := rate.NewLimiter(rate.Limit(r), burst)
		mean := float64(time.Second) / r // one token's time
		for i := 0; i < steps; i++ {
			var gap time.Duration
			switch rng.Intn(4) {
			case 0: // same instant
			case 1:
				gap = time.Duration(rng.Int63n(1000)) // nanoseconds: rounding edges
			default:
				gap = time.Duration(rng.Float64() * 2 * mean * float64(1+rng.Intn(burst)))
			}
			clock.Advance(gap)
			n := 1 + rng.Intn(burst+1) // sometimes more than burst
			want := oracle.AllowN(clock.Now(), n)
			lease, err := ours.Acquire(ctx, n)
			got := err == nil && lease.Acquired()
			if err != nil && !(n > burst && errors.Is(err, ratelimit.ErrExceedsLimit)) {
				t.Fatalf("seq %d step %d: Acquire(%d): %v", seq, i, n, err)
			}
			if got != want {
				t.Fatalf("seq %d step %d (rate %v burst %d, gap %v, n %d): granted %v, x/time/rate %v",
					seq, i, r, burst, gap, n, got, want)
			}
			if got {
				grants++
			} else {
				refusals++
			}
		}
		ours.Close()
	}
	// Both outcomes must be well represented for the comparison to mean something.
	if grants < sequences*steps/10 || refusals < sequences*steps/10 {
		t.Fatalf("unbalanced sample: %d grants, %d refusals", grants, refusals)
	}
	t.Logf("%d sequences: %d grants, %d refusals, all equal to x/time/rate", sequences, grants, refusals)
}
