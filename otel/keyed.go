package otel

import (
	"context"
	"io"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/internal/backend"
)

// KeyedLimiter is a limiter of many resources, each with its own limit:
// *partitioned.Limiter[R], and for R string httplimit.Keyed.
type KeyedLimiter[R any] interface {
	Acquire(ctx context.Context, resource R, permits int) (ratelimit.Lease, error)
	Wait(ctx context.Context, resource R, permits int) (ratelimit.Lease, error)
}

// ObservableKeyedWaiter is a KeyedLimiter whose Wait can tell a
// ratelimit.QueueObserver of the calls that queue, as a
// ratelimit.ObservableWaiter does for one limiter: *partitioned.Limiter[R]
// is one.
type ObservableKeyedWaiter[R any] interface {
	WaitObserved(ctx context.Context, resource R, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error)
}

// Keyed is a KeyedLimiter whose decisions are recorded on a Recorder: those
// of every resource's limiter and the keyed limiter's own (a partitioned
// limiter's ReasonNoPartition refusals and ErrNoPartition errors), under
// the Recorder's attributes, never the resource's key. A Keyed[string] is an
// httplimit.Keyed, for httplimit.Middleware and httplimit.Transport.
//
// Concurrency leases are not tracked through Keyed (ratelimit.active_request_leases):
// wrap the partitions' limiters instead (Recorder.ForKey).
type Keyed[R any] struct {
	k  KeyedLimiter[R]
	ow ObservableKeyedWaiter[R] // k, when it reports the Waits that queue
	r  *Recorder
}

// WrapKeyed returns k recording its decisions on r. The Keyed owns k: its
// Close closes k (when an io.Closer), not r.
func WrapKeyed[R any](r *Recorder, k KeyedLimiter[R]) *Keyed[R] {
	ow, _ := k.(ObservableKeyedWaiter[R])
	return &Keyed[R]{k: k, ow: ow, r: r}
}

// Acquire is the keyed limiter's Acquire, recorded.
func (k *Keyed[R]) Acquire(ctx context.Context, resource R, permits int) (ratelimit.Lease, error) {
	r := k.r
	if !r.timed {
		lease, err := k.k.Acquire(ctx, resource, permits)
		r.record(lease, err, permits)
		return lease, err
	}
	start := monotonic()
	lease, err := k.k.Acquire(ctx, resource, permits)
	r.backendDuration.Record(nonNil(ctx), (monotonic() - start).Seconds(), r.backendOpts[resultIndex(lease, err)]...)
	r.record(lease, err, permits)
	return lease, err
}

// Wait is the keyed limiter's Wait, recorded as Limiter.Wait is: only the
// calls that queue are counted in the queue instruments when the keyed
// limiter is an ObservableKeyedWaiter; every call otherwise.
func (k *Keyed[R]) Wait(ctx context.Context, resource R, permits int) (ratelimit.Lease, error) {
	r := k.r
	var lease ratelimit.Lease
	var err error
	if k.ow != nil {
		lease, err = k.ow.WaitObserved(ctx, resource, permits, (*queueObserver)(r))
	} else {
		lease, err = backend.WaitTold(ctx, permits, (*queueObserver)(r), func() (ratelimit.Lease, error) { return k.k.Wait(ctx, resource, permits) })
	}
	r.record(lease, err, permits)
	return lease, err
}

// Refund gives a grant of resource back to the keyed limiter when it can
// take it back (a partitioned limiter does: see its Refund), and releases
// the lease otherwise; it is not recorded. So a Keyed[string] over a
// partitioned limiter is an httplimit.KeyedRefunder, and a request that a
// later policy refuses spends nothing of it.
func (k *Keyed[R]) Refund(ctx context.Context, resource R, lease ratelimit.Lease, permits int) error {
	if rf, ok := k.k.(interface {
		Refund(ctx context.Context, resource R, lease ratelimit.Lease, permits int) error
	}); ok {
		return rf.Refund(ctx, resource, lease, permits)
	}
	lease.Release()
	return nil
}

// Config is the keyed limiter's Config when it is an httplimit.Configured
// (a policy's Keyed), so that the HTTP middleware over a recorded policy
// follows its live changes; nil otherwise.
func (k *Keyed[R]) Config() ratelimit.Config {
	if c, ok := k.k.(httplimit.Configured); ok {
		return c.Config()
	}
	return nil
}

// Unwrap returns the wrapped keyed limiter.
func (k *Keyed[R]) Unwrap() KeyedLimiter[R] { return k.k }

// Close closes the keyed limiter when it is an io.Closer.
func (k *Keyed[R]) Close() error {
	if c, ok := k.k.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
