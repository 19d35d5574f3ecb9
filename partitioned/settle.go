package partitioned

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

// Settle settles lease, a reservation of a grant that Acquire or Wait made
// for key (control.Reserve over For(key)), at the actual cost (see
// control.Settle): it passes it to the limiter that made the grant, key's
// partition's or Overflow's, which settles it. When key's partition is
// gone (evicted: a memory partition only once its grants came back with
// time; a Redis handle's state is in Redis), a settlement that charges
// nothing has nothing to give back and is claimed as made; one that
// charges (actual above the reservation) makes the partition again, whose
// limiter (made by the same memory or redis Factory, whose limiters know
// each other's grants) counts the excess. A partition that cannot be made
// (MaxPartitions busy, a failing Config.New) is an error wrapping
// ErrNoPartition, and nothing is settled nor counted. Invalid settlements
// are reported as control.Settle says; a lease of another limiter is told
// apart by the limiter that settles it (when none does, nothing changes
// but the lease, claimed). An Overflow grant held until Release (a
// concurrency limiter's) has no cost to settle: Overflow's Settle says so
// (an error wrapping errors.ErrUnsupported), the reservation is settled as
// nothing, and its permit comes back on its Release (control.Refund of the
// reservation, not settled before, releases it).
func (l *Limiter) Settle(ctx context.Context, key string, lease ratelimit.Lease, actual int) error {
	grant, permits, err := lease.CheckSettle(ctx, actual)
	if err != nil {
		return err
	}
	if l == nil || l.cfg.New == nil {
		return fmt.Errorf("%w: partitioned: a Limiter must be made by New", ratelimit.ErrInvalidConfig)
	}
	if l.closed.Load() {
		return ratelimit.ErrClosed
	}
	if o := grant.Outcome(); o != nil {
		if g, ok := o.Releaser.(*overflowGrant); ok && g.owner == l && o == &g.o {
			s, ok := control.As[interface {
				Settle(context.Context, ratelimit.Lease, int) error
			}](l.cfg.Overflow)
			if !ok {
				return fmt.Errorf("partitioned: the Overflow limiter (%T) cannot settle: %w", l.cfg.Overflow, errors.ErrUnsupported)
			}
			if err := lease.ClaimSettlement(); err != nil {
				return err
			}
			return s.Settle(ctx, g.lease.Reserve(permits), actual)
		}
	}
	p := l.lookup(key)
	if p == nil {
		if actual <= permits { // nothing to charge, nothing left to give back
			return lease.ClaimSettlement()
		}
		var lim ratelimit.Limiter
		if lim, p, _, err = l.get(key); lim == nil && err != nil {
			return err
		} else if lim == nil || p == nil { // no partition can be made now; Overflow did not make the grant
			if lim == nil {
				l.stats.refused.Add(-1) // counted as a request's refusal: it is not one
			}
			return fmt.Errorf("%w %q: MaxPartitions are busy: the settlement is not made", ErrNoPartition, key)
		}
	}
	defer p.done()
	return control.Settle(ctx, p.limiter, lease, actual)
}

// Settle is the partitioned limiter's Settle for the key.
func (b bound) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	return b.l.Settle(ctx, b.key, lease, actual)
}
