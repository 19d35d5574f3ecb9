package control

import (
	"context"

	"github.com/limitkit/ratelimit"
)

// settler is the capability Settle reaches.
type settler interface {
	Settle(ctx context.Context, lease ratelimit.Lease, actual int) error
}

// Reserve is l.Acquire(ctx, permits) for work whose cost is known only once
// it is done (LLM tokens, bytes, compute): permits is the estimate, and
// the grant's lease can be settled once with the actual cost (Settle). It
// is the grant made a reservation (Lease.Reserve, one small
// allocation); a refusal or an error is returned as Acquire returned it.
// A limiter that cannot settle (no Settle method through its Unwrap chain:
// FromRate's, one of one's own) is an error wrapping errors.ErrUnsupported
// before anything is asked of it. Every decision of the wrappers around
// the limiter (metrics, a shadow limit, a Chain, partitions) is made as
// for Acquire.
func Reserve(ctx context.Context, l ratelimit.Limiter, permits int) (ratelimit.Lease, error) {
	return reserve(ctx, l, permits, false)
}

// ReserveWait is Reserve with l.Wait: it waits for the estimate's permits
// as Wait does.
func ReserveWait(ctx context.Context, l ratelimit.Limiter, permits int) (ratelimit.Lease, error) {
	return reserve(ctx, l, permits, true)
}

func reserve(ctx context.Context, l ratelimit.Limiter, permits int, wait bool) (ratelimit.Lease, error) {
	if _, err := find[settler](l, "Settle"); err != nil {
		return ratelimit.Lease{}, err
	}
	var lease ratelimit.Lease
	var err error
	if wait {
		lease, err = l.Wait(ctx, permits)
	} else {
		lease, err = l.Acquire(ctx, permits)
	}
	if err != nil {
		return lease, err
	}
	return lease.Reserve(permits), nil
}

// Settle reports the actual cost of the work that lease, a reservation of
// l (Reserve, ReserveWait), admitted: actual permits where it reserved n.
//
//   - actual < n gives back n - actual permits exactly as Refund would
//     give them back (what has come back with time since the grant is not
//     given twice);
//   - actual > n charges the extra actual - n permits without refusing
//     (the work is done): a token bucket's tokens go below zero, a
//     window's count over its limit, and later requests wait or are
//     refused until that debt is paid, with an exact RetryAfter;
//   - actual == n changes nothing.
//
// A lease settles once. Settling a refusal, the zero Lease, a grant that
// was not reserved, a lease settled already, or a lease of another
// limiter is an error wrapping ratelimit.ErrInvalidLease (but limiters
// made by one Factory, or on one Redis key, cannot tell each other's
// grants apart, as for Refund: settle a lease on the limiter that made
// it), and a negative actual one wrapping ratelimit.ErrInvalidPermits:
// they change nothing (of two concurrent settlements of one lease, exactly
// one is made). A limiter
// that cannot settle returns an error wrapping errors.ErrUnsupported: a
// concurrency limit, whose lease holds its permits until Release (there
// is no cost to settle after the work), and FromRate's. A backend that
// fails (Redis) returns its error; the lease is then settled or not, but
// never twice.
//
// Every algorithm caps what a limiter counts at 2^53 permits (the bound of
// every count, exact in Redis's Lua numbers): a charge beyond it is not
// counted. The memory and redis backends make the same settlements (on
// Redis in one script run), and a Chain settles each member's grant but a
// concurrency member's (see ratelimit.Chain's Settle).
func Settle(ctx context.Context, l ratelimit.Limiter, lease ratelimit.Lease, actual int) error {
	s, err := find[settler](l, "Settle")
	if err != nil {
		return err
	}
	return s.Settle(ctx, lease, actual)
}
