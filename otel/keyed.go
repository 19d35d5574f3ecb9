package otel

import (
	"context"
	"io"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/httplimit"
)

// Keyed is a ratelimit.Keyed whose decisions are recorded on a Recorder:
// those of every key's limiter and the keyed limiter's own (a partitioned
// limiter's ReasonNoPartition refusals and ErrNoPartition errors), under
// the Recorder's attributes, never the key. It is what httplimit.Middleware
// and httplimit.Transport take.
//
// Concurrency leases are not tracked through Keyed (ratelimit.active_request_leases):
// wrap the partitions' limiters instead (Recorder.ForKey), and not the
// partitioned limiter too on the same Recorder, which would count each
// decision twice.
type Keyed struct {
	k ratelimit.Keyed
	r *Recorder
}

// WrapKeyed returns k recording its decisions on r. The Keyed owns k: its
// Close closes k (when an io.Closer), not r.
func WrapKeyed(r *Recorder, k ratelimit.Keyed) *Keyed { return &Keyed{k: k, r: r} }

// Acquire is the keyed limiter's Acquire, recorded.
func (k *Keyed) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	r := k.r
	if !r.timed {
		lease, err := k.k.Acquire(ctx, key, permits)
		r.record(lease, err, permits)
		return lease, err
	}
	start := monotonic()
	lease, err := k.k.Acquire(ctx, key, permits)
	r.backendDuration.Record(nonNil(ctx), (monotonic() - start).Seconds(), r.backendOpts[resultIndex(lease, err)]...)
	r.record(lease, err, permits)
	return lease, err
}

// Wait is the keyed limiter's Wait, recorded as Limiter.Wait is.
func (k *Keyed) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	lease, err := k.k.Wait(k.r.withHooks(ctx), key, permits)
	k.r.record(lease, err, permits)
	return lease, err
}

// For is the keyed limiter's limiter of key, when it has one (see
// ratelimit.Keyed), recorded on the Recorder: its Acquire and Wait as
// Keyed's, its settlements (control.Settle) in ratelimit.settled_permits.
// It unwraps to the keyed limiter's own, through which package control
// reaches the key's other capabilities (a Refund, not recorded, so that a
// request that a later policy refuses spends nothing of it). It is nil
// otherwise.
func (k *Keyed) For(key string) ratelimit.Limiter {
	if f, ok := k.k.(interface {
		For(string) ratelimit.Limiter
	}); ok {
		if l := f.For(key); l != nil {
			return keyLimiter{l, k.r}
		}
	}
	return nil
}

// Config is the keyed limiter's Config when it is an httplimit.Configured
// (a policy's Keyed), so that the HTTP middleware over a recorded policy
// follows its live changes; nil otherwise.
func (k *Keyed) Config() ratelimit.Config {
	if c, ok := k.k.(httplimit.Configured); ok {
		return c.Config()
	}
	return nil
}

// Unwrap returns the wrapped keyed limiter.
func (k *Keyed) Unwrap() ratelimit.Keyed { return k.k }

// Close closes the keyed limiter when it is an io.Closer.
func (k *Keyed) Close() error {
	if c, ok := k.k.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
