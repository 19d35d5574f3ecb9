package control_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/slidinglog"
)

// Reserve and Settle reach the limiter through a wrapper's Unwrap; a
// limiter that cannot settle is refused before Reserve takes anything.
func TestReserveSettle(t *testing.T) {
	ctx := context.Background()
	inner, err := memory.New(slidinglog.Config{Limit: 10, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	for name, l := range map[string]ratelimit.Limiter{"plain": plain{inner}, "self": &self{plain{inner}}} {
		if _, err := control.Reserve(ctx, l, 4); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Reserve = %v, want ErrUnsupported", name, err)
		}
		if err := control.Settle(ctx, l, ratelimit.Lease{}, 1); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Settle = %v, want ErrUnsupported", name, err)
		}
	}
	if st := inner.Stats(); st.Available != 10 {
		t.Fatalf("a refused Reserve took permits: %+v", st)
	}
	r := &resetting{Limiter: inner}
	lease, err := control.ReserveWait(ctx, r, 4)
	if err != nil || !lease.Acquired() {
		t.Fatalf("ReserveWait(4) through a wrapper: %v, %v", lease, err)
	}
	if err := control.Settle(ctx, r, lease, 7); err != nil {
		t.Fatal(err)
	}
	if st := inner.Stats(); st.Available != 3 {
		t.Fatalf("4 reserved, settled at 7: %+v, want 3 available", st)
	}
	refused, err := control.Reserve(ctx, r, 4)
	if err != nil || refused.Acquired() {
		t.Fatalf("Reserve(4) of 3: %v, %v; want refused", refused, err)
	}
	if _, _, ok := refused.Reservation(); ok {
		t.Fatal("a refusal is a reservation")
	}
}

// A job whose cost is known once it is done reserves an estimate and
// settles what it used: less gives the rest back, more is a debt.
func ExampleSettle() {
	ctx := context.Background()
	l, err := memory.New(slidinglog.Config{Limit: 100, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	lease, _ := control.Reserve(ctx, l, 30) // the estimate
	fmt.Println("reserved 30:", lease.Remaining(), "left")
	_ = control.Settle(ctx, l, lease, 12) // what the job used
	fmt.Println("used 12:", l.Stats().Available, "left")

	lease, _ = control.Reserve(ctx, l, 50)
	_ = control.Settle(ctx, l, lease, 95) // it used more: 45 charged
	fmt.Println("reserved 50, used 95:", l.Stats().Available, "left")
	next, _ := l.Acquire(ctx, 1)
	fmt.Println("next request granted:", next.Acquired())
	fmt.Println("settling again:", errors.Is(control.Settle(ctx, l, lease, 0), ratelimit.ErrInvalidLease))
	// Output:
	// reserved 30: 70 left
	// used 12: 88 left
	// reserved 50, used 95: 0 left
	// next request granted: false
	// settling again: true
}
