package shadow

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

// Settle settles lease, a reservation of a grant of the shadow limiter
// (control.Reserve), at the actual cost (see control.Settle). A grant of
// the wrapped limiter is settled there, through its Settle (found through
// Unwrap, as control.Settle finds it): its excess is charged, and what it
// reserved beyond the cost comes back, so the wrapped limiter's later
// decisions, and the refusals the shadow limiter reports, are those of
// the limit enforced on the actual costs. A request the wrapped limiter
// refused took nothing there and is settled as nothing (as if it had been
// turned away, which is how the wrapped limiter keeps its state). A
// wrapped limiter that cannot settle is an error wrapping
// errors.ErrUnsupported, and a lease of another limiter one wrapping
// ratelimit.ErrInvalidLease; both settle nothing.
func (s *Limiter) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	grant, permits, err := lease.CheckSettle(ctx, actual)
	if err != nil {
		return err
	}
	var inner ratelimit.Lease
	switch token, hidden := s.hidden.Token(grant); {
	case hidden:
		inner = s.known.Load().Lease(0, 0, 0, token)
	case s.grantOf(grant) != nil:
		inner = s.grantOf(grant).inner
	case grant.Outcome() == &s.free:
		return lease.ClaimSettlement() // the wrapped limiter refused it: nothing to settle
	default:
		return fmt.Errorf("%w: not a grant of this shadow limiter", ratelimit.ErrInvalidLease)
	}
	st, ok := control.As[interface {
		Settle(context.Context, ratelimit.Lease, int) error
	}](s.l)
	if !ok {
		return fmt.Errorf("shadow: %T has no Settle: %w", s.l, errors.ErrUnsupported)
	}
	if err := lease.ClaimSettlement(); err != nil {
		return err
	}
	return st.Settle(ctx, inner.Reserve(permits), actual)
}
