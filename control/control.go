// Package control reaches the optional capabilities of a limiter through
// the wrappers around it, as net/http.ResponseController reaches those of
// a ResponseWriter: a refund, a settlement of a reserved cost, a reset, a
// new configuration, a snapshot.
//
// A limiter offers a capability by its method (Refund, Settle, Reset,
// Reconfigure, Stats, with the signatures below). A wrapper (a metrics recorder, a
// shadow limit, one's own) implements Unwrap() ratelimit.Limiter and so
// offers every capability of what it wraps without forwarding it; it
// implements a capability itself only where its meaning changes (a Chain's
// all-or-nothing Refund). Each function here asks l, then what l unwraps
// to, and so on, and calls the first that has the method; when none has,
// it returns an error wrapping errors.ErrUnsupported.
//
// The memory and redis limiters and their Factories' limiters have all
// five (a concurrency limit's Settle refuses: it has no cost to settle); a
// Chain refunds and settles (it holds several limiters and unwraps to
// none). Reserve and ReserveWait make the grants that Settle settles.
package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
)

// Refund gives back the permits of lease, a grant of permits that l
// returned, as if the request had not been made: its permits, and its
// count in Stats (Granted). What has come back with time since the grant
// (a window that ended, tokens that refilled past the burst) is not given
// twice. A refund is trusted: the caller passes a grant of this limiter,
// once, with the permits it asked for; then the limiter never lets more
// through than its limit. A refusal, or a lease of a limiter of another
// configuration, gives nothing back; but limiters made by one Factory (or
// on one Redis key) share their leases' outcome and cannot tell each
// other's grants apart, and a second refund of a grant gives its permits
// again. ratelimit.Chain uses it to make an attempt that a later member
// refuses spend nothing of the earlier ones. A reservation (Reserve) is
// refunded by settling it (Settle) at its permits less these: once, as a
// settlement is; one whose Settle answers that it has no cost to settle
// (an error with a NoCost() method, as a concurrency limit's of the memory
// and redis backends) is refunded as its grant is.
func Refund(ctx context.Context, l ratelimit.Limiter, lease ratelimit.Lease, permits int) error {
	if grant, n, ok := lease.Reservation(); ok {
		if permits < 0 {
			return fmt.Errorf("%w: %d is negative", ratelimit.ErrInvalidPermits, permits)
		}
		err := Settle(ctx, l, lease, max(n-permits, 0))
		if !backend.IsNoCost(err) {
			return err
		}
		lease = grant
	}
	r, err := find[interface {
		Refund(ctx context.Context, lease ratelimit.Lease, permits int) error
	}](l, "Refund")
	if err != nil {
		return err
	}
	return r.Refund(ctx, lease, permits)
}

// Reset puts l back in its initial state (a full bucket, empty windows,
// nothing held: a concurrency lease held before gives nothing back when
// released): after a successful login, in tests, by an operator. Queued
// waiters are examined again. On Redis it changes the state every process
// shares. A rate limit's grants made before a Reset are not told apart
// from later ones: refunding or settling one after it gives its permits
// back a second time (the Reset gave them back already), as a second
// refund of a grant would; refund before resetting, or not at all. On
// Redis, a token bucket's Wait sleeping on its reservation across a Reset
// and then cancelled gives its tokens back so too (memory takes the
// queued reservations again from the full bucket).
func Reset(ctx context.Context, l ratelimit.Limiter) error {
	r, err := find[interface {
		Reset(ctx context.Context) error
	}](l, "Reset")
	if err != nil {
		return err
	}
	return r.Reset(ctx)
}

// Reconfigure validates cfg, which must be of the algorithm l runs (the
// same Config type, value or pointer), and applies it from the next
// decision; an invalid cfg, or one of another algorithm (or one its backend
// documents it cannot apply), is an error wrapping ErrInvalidConfig and
// changes nothing. The state carries over by the rule each algorithm
// package documents (a token bucket keeps its tokens, clamped to the new
// burst; windows keep their counts, held against the new limit; a
// concurrency limit's holders keep their permits, and the new limit applies
// to new requests), so a change never admits more than the old or the new
// limit would have. Queued waiters are examined again under the new
// configuration; their queue is kept even when it exceeds a smaller new
// Queue.Limit.
func Reconfigure(l ratelimit.Limiter, cfg ratelimit.Config) error {
	r, err := find[interface {
		Reconfigure(cfg ratelimit.Config) error
	}](l, "Reconfigure")
	if err != nil {
		return err
	}
	return r.Reconfigure(cfg)
}

// Stats returns a snapshot of l (see ratelimit.Stats).
func Stats(l ratelimit.Limiter) (ratelimit.Stats, error) {
	r, err := find[interface{ Stats() ratelimit.Stats }](l, "Stats")
	if err != nil {
		return ratelimit.Stats{}, err
	}
	return r.Stats(), nil
}

// As finds the first limiter in l's Unwrap chain, l included, that is a T
// (an interface of the capability sought, or a concrete type), as
// errors.As does for errors. The walk stops after 100 links (a wrapper
// that unwraps to itself).
func As[T any](l ratelimit.Limiter) (T, bool) {
	for range maxUnwrap {
		if l == nil {
			break
		}
		if t, ok := l.(T); ok {
			return t, true
		}
		u, ok := l.(interface{ Unwrap() ratelimit.Limiter })
		if !ok {
			break
		}
		l = u.Unwrap()
	}
	var zero T
	return zero, false
}

const maxUnwrap = 100

// find is As, or an error wrapping errors.ErrUnsupported that names l and
// the method.
func find[T any](l ratelimit.Limiter, method string) (T, error) {
	t, ok := As[T](l)
	if !ok {
		return t, fmt.Errorf("control: %T has no %s: %w", l, method, errors.ErrUnsupported)
	}
	return t, nil
}
