package quota_test

import (
	"context"
	"errors"
	"testing"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/quota"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// A quota settles as a window does, on every backend: reserve 100 and
// settle 30, and 70 come back; reserve 10 and settle 50, and 40 of debt are
// counted in the period, so that requests are refused until it ends, to
// the tick, whatever was refunded by then. Bad settlements change nothing.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := ratelimittest.NewClockAt(at(t, "2033-06-15T10:00:00+02:00"))
			end := at(t, "2033-06-16T00:00:00+02:00") // Paris midnight
			l := b.f(t, quota.Config{Limit: 100, Period: quota.Day, Timezone: "Europe/Paris"}, clock)
			left := func(what string, want int64) {
				t.Helper()
				s, err := l.Acquire(ctx, 0)
				if err != nil || s.Remaining() != want {
					t.Fatalf("%s: %v, %v; want %d remaining", what, s, err, want)
				}
			}

			r, err := control.Reserve(ctx, l, 100)
			if err != nil || !r.Acquired() {
				t.Fatalf("Reserve(100): %v, %v", r, err)
			}
			if err := control.Settle(ctx, l, r, 30); err != nil {
				t.Fatal(err)
			}
			left("reserved 100, settled 30", 70)
			if err := control.Settle(ctx, l, r, 30); !errors.Is(err, ratelimit.ErrInvalidLease) {
				t.Fatalf("a second settlement: %v, want ErrInvalidLease", err)
			}
			left("after a refused second settlement", 70)

			r, err = control.Reserve(ctx, l, 10)
			if err != nil || !r.Acquired() {
				t.Fatalf("Reserve(10): %v, %v", r, err)
			}
			if err := control.Settle(ctx, l, r, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
				t.Fatalf("a negative settlement: %v, want ErrInvalidPermits", err)
			}
			left("after a refused negative settlement", 60)
			if err := control.Settle(ctx, l, r, 110); err != nil { // 100 beyond: 30 + 110 = 140 counted
				t.Fatal(err)
			}
			left("30 settled, 110 charged", 0)
			clock.Set(end.Add(-b.tick))
			if g, err := l.Acquire(ctx, 1); err != nil || g.Acquired() {
				t.Fatalf("a tick before the period's end: %v, %v; want refused", g, err)
			} else if d, ok := g.RetryAfter(); !ok || d != b.tick {
				t.Fatalf("RetryAfter %v, %v; want %v", d, ok, b.tick)
			}
			clock.Set(end)
			if g, err := l.Acquire(ctx, 1); err != nil || !g.Acquired() || g.Remaining() != 99 {
				t.Fatalf("at the period's end: %v, %v; want granted, 99 left", g, err)
			}
		})
	}
}
