package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidingwindow"
)

// A waiter queued for more than the new capacity is never served and
// blocks every later request.
func TestReconfigureRefusesOversizedWaiter(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, fixedwindow.Config{Limit: 10, Window: time.Second}, clock)
	mustAcquire(t, l, 10)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	w := goWait(t, l, ctx, 8, 8)
	reconfigure(t, l, fixedwindow.Config{Limit: 5, Window: time.Second})
	for i := 0; i < 5; i++ {
		clock.Advance(time.Second)
	}
	select {
	case a := <-w:
		if a.err != nil || a.lease.Acquired() || a.lease.Reason() != ratelimit.ReasonLimit {
			t.Errorf("waiter of 8 after the limit fell to 5: %v, %v; want refused (ReasonLimit)", a.lease, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("waiter of 8 permits still queued 5 windows after the limit fell to 5")
	}
	if g := mustAcquire(t, l, 1); !g.Acquired() {
		t.Errorf("Acquire(1) in a fresh window with limit 5 refused: %v (stats %+v)", g, l.Stats())
	}
}

// A concurrency lease of more permits than the new limit cannot be refunded.
func TestReconfigureConcurrencyRefundAfterShrink(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newLimiter(t, concurrency.Config{Limit: 10}, clock)
	g := mustAcquire(t, l, 8)
	reconfigure(t, l, concurrency.Config{Limit: 4})
	err := l.Refund(bg, g, 8)
	reconfigure(t, l, concurrency.Config{Limit: 10})
	if got := available(t, l); got != 10 {
		t.Errorf("Refund(8) after the limit fell to 4: err %v; Available afterwards = %d, want 10 (8 permits leaked)", err, got)
	}
}

// Weighted sliding window, and the same with a fixed window: Available is
// floored at 0, so a count over a shrunk limit is lost on the next change.
func TestReconfigureWeightedChain(t *testing.T) {
	clock := ratelimittest.NewClock()
	for _, tc := range []struct {
		name string
		cfg  func(limit int) ratelimit.Config
	}{
		{"weighted sliding window", func(n int) ratelimit.Config { return slidingwindow.Config{Limit: n, Window: time.Hour} }},
		{"fixed window", func(n int) ratelimit.Config { return fixedwindow.Config{Limit: n, Window: time.Hour} }},
	} {
		l := newLimiter(t, tc.cfg(10), clock)
		mustAcquire(t, l, 8)
		reconfigure(t, l, tc.cfg(5))
		reconfigure(t, l, tc.cfg(7))
		if got := available(t, l); got != 0 {
			t.Errorf("%s, 8 used, limit 10 -> 5 -> 7: Available = %d, want 0", tc.name, got)
		}
	}
}
