package otel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

type settler interface {
	Settle(ctx context.Context, lease ratelimit.Lease, actual int) error
}

// Settle settles a reservation of the wrapped limiter through its Settle
// (control.Settle), and counts what a settlement made in
// ratelimit.settled_permits: the permits it gave back (settlement
// "returned") or charged ("charged"). A Redis limiter's settlement is
// timed in ratelimit.backend.duration, as its Refund is. A wrapped limiter
// that cannot settle is an error wrapping errors.ErrUnsupported. A
// settlement that returns an error is not counted, also when it applied
// to some members of a Chain before another failed.
func (w *Limiter) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	return settle(ctx, w.l, w.r, lease, actual)
}

// settle settles lease on l, counted (and timed) on r.
func settle(ctx context.Context, l ratelimit.Limiter, r *Recorder, lease ratelimit.Lease, actual int) error {
	s, ok := control.As[settler](l)
	if !ok {
		return fmt.Errorf("otel: %T has no Settle: %w", l, errors.ErrUnsupported)
	}
	var start time.Duration
	if r.timed {
		start = monotonic()
	}
	err := s.Settle(ctx, lease, actual)
	if r.timed && ctx != nil {
		r.backendDuration.Record(ctx, (monotonic() - start).Seconds(), r.backendOpts[result(true, err)]...)
	}
	if err == nil {
		_, n, _ := lease.Reservation()
		r.settle(n, actual)
	}
	return err
}

// keyLimiter is the limiter of one key of a Keyed: its decisions and
// settlements are recorded, and it unwraps to the keyed limiter's own.
type keyLimiter struct {
	l ratelimit.Limiter
	r *Recorder
}

// Acquire is the key's limiter's Acquire, recorded.
func (k keyLimiter) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	lease, err := k.l.Acquire(ctx, permits)
	k.r.record(lease, err, permits)
	return lease, err
}

// Wait is the key's limiter's Wait, recorded.
func (k keyLimiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	lease, err := k.l.Wait(k.r.withHooks(ctx), permits)
	k.r.record(lease, err, permits)
	return lease, err
}

// Settle is the key's limiter's Settle, counted.
func (k keyLimiter) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	return settle(ctx, k.l, k.r, lease, actual)
}

// Unwrap returns the keyed limiter's limiter of the key.
func (k keyLimiter) Unwrap() ratelimit.Limiter { return k.l }
