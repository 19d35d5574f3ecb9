package shadow_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/shadow"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// With reservations settled at random costs, the shadow limiter reports
// exactly the refusals the same limit, enforced on the same costs, makes:
// a grant of the wrapped limiter settles there, a refused request as
// nothing.
func TestShadowSettlesAsEnforced(t *testing.T) {
	for _, cfg := range []ratelimit.Config{
		tokenbucket.Config{Rate: 20, Burst: 10},
		fixedwindow.Config{Limit: 12, Window: time.Second},
		slidinglog.Config{Limit: 10, Window: time.Second},
	} {
		t.Run(typeName(cfg), func(t *testing.T) {
			clock := ratelimittest.NewClock()
			enforced := newMemory(t, cfg, clock)
			rec := &recorder{}
			s := shadow.New(newMemory(t, cfg, clock), rec.record)
			rng := rand.New(rand.NewPCG(3, 4))
			ctx := context.Background()
			type pair struct{ e, s ratelimit.Lease }
			var open []pair
			refusals, settled := 0, 0
			for i := 0; i < 1000; i++ {
				clock.Advance(time.Duration(rng.IntN(int(80 * time.Millisecond))))
				if len(open) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(open))
					actual := rng.IntN(15)
					err1 := control.Settle(ctx, enforced, open[k].e, actual)
					err2 := control.Settle(ctx, s, open[k].s, actual)
					if (err1 == nil) != (err2 == nil) {
						t.Fatalf("step %d: Settle(%d): enforced %v, shadow %v", i, actual, err1, err2)
					}
					if err1 != nil && !errors.Is(err1, ratelimit.ErrInvalidLease) {
						t.Fatal(err1)
					}
					open = append(open[:k], open[k+1:]...)
					settled++
				}
				permits := 1 + rng.IntN(5)
				e, err := control.Reserve(ctx, enforced, permits)
				if err != nil {
					t.Fatal(err)
				}
				g, err := control.Reserve(ctx, s, permits)
				if err != nil || !g.Acquired() {
					t.Fatalf("step %d: shadow answered %v, %v; want a grant", i, g, err)
				}
				if !e.Acquired() {
					refusals++
					// The enforced limit has nothing to settle; the shadow
					// grant settles as nothing.
					if err := control.Settle(ctx, s, g, 100); err != nil {
						t.Fatalf("step %d: settling a shadow grant of a refusal: %v", i, err)
					}
					continue
				}
				open = append(open, pair{e, g})
			}
			if refusals == 0 || settled == 0 || rec.len() != refusals {
				t.Fatalf("%d refusals reported, the enforced limit made %d (%d settlements)", rec.len(), refusals, settled)
			}
			if st, est := stats(s), enforced.Stats(); st != est {
				t.Fatalf("Stats %+v, enforced %+v", st, est)
			}
		})
	}
}

// A concurrency limit's grant cannot be settled through the shadow
// limiter either.
func TestShadowSettleConcurrency(t *testing.T) {
	s := shadow.New(newMemory(t, concurrency.Config{Limit: 1}, ratelimittest.NewClock()), nil)
	g, _ := control.Reserve(context.Background(), s, 1)
	if err := control.Settle(context.Background(), s, g, 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Settle = %v, want ErrUnsupported", err)
	}
}
