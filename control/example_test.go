package control_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
)

// counting is a wrapper of one's own: it counts the requests, and by
// Unwrap keeps every capability of the limiter it wraps.
type counting struct {
	ratelimit.Limiter
	calls int
}

func (c *counting) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	c.calls++
	return c.Limiter.Acquire(ctx, permits)
}

func (c *counting) Unwrap() ratelimit.Limiter { return c.Limiter }

// A wrapper that implements Unwrap keeps Refund, Reset, Reconfigure and
// Stats of what it wraps, without forwarding them.
func Example() {
	ctx := context.Background()
	inner, err := memory.New(fixedwindow.Config{Limit: 3, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	defer inner.Close()
	var l ratelimit.Limiter = &counting{Limiter: inner}

	lease, _ := l.Acquire(ctx, 2)
	st, _ := control.Stats(l)
	fmt.Println("after a grant of 2:", st.Available)

	_ = control.Refund(ctx, l, lease, 2)
	st, _ = control.Stats(l)
	fmt.Println("after its refund:", st.Available)

	_ = control.Reconfigure(l, fixedwindow.Config{Limit: 5, Window: time.Minute})
	l.Acquire(ctx, 1)
	_ = control.Reset(ctx, l)
	st, _ = control.Stats(l)
	fmt.Println("reconfigured to 5, then reset:", st.Available)
	// Output:
	// after a grant of 2: 1
	// after its refund: 3
	// reconfigured to 5, then reset: 5
}
