package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestReservationOverCapacity: a reservation of more permits than the
// burst that reaches the script (a Reconfigure lowered the burst after
// Wait's own check) is refused there, whatever room the queue has (an
// interval bucket's refills would otherwise cover any debt), and changes
// nothing; the caller gets ErrExceedsLimit, as Wait's own check says.
func TestReservationOverCapacity(t *testing.T) {
	ctx := context.Background()
	cfg := tokenbucket.Config{Period: time.Second, PerPeriod: 1, Burst: 5, Queue: ratelimit.Queue{Limit: 100}}
	for name, c := range bothServers(t) {
		t.Run(name, func(t *testing.T) {
			l, err := New(c, "over-capacity", cfg, WithClock(ratelimittest.NewClock()))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if r, err := l.call(ctx, l.localNow(), opWait, 6, int64(-1)); err != nil || r.granted || r.refusal != refusedQueueFull {
				t.Fatalf("the script, asked to reserve 6 on a burst of 5: %+v, %v; want refused as the queue's", r, err)
			}
			if lease, err := l.reserve(ctx, 6, nil); !errors.Is(err, ratelimit.ErrExceedsLimit) {
				t.Fatalf("reserve(6) on a burst of 5: %v, %v; want ErrExceedsLimit", lease, err)
			}
			if g, err := l.Acquire(ctx, 5); err != nil || !g.Acquired() || g.Remaining() != 0 {
				t.Fatalf("the whole burst after them: %v, %v; want granted (nothing was reserved)", g, err)
			}
		})
	}
}
