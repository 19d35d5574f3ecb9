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
// partition's or Overflow's, which settles it. Unlike Refund it creates
// key's partition when it is gone, since a cost above the reservation must
// be charged: when the partition was evicted, its limiter (made by the
// same memory or redis Factory, whose limiters know each other's grants)
// charges the excess, and has nothing to give back (a memory partition is
// evicted only once its grants came back with time; a Redis handle's
// state is in Redis). A partition that cannot be made (MaxPartitions
// busy, a failing Config.New) is an error wrapping ErrNoPartition, and
// nothing is settled. Invalid settlements are reported as control.Settle
// says, before any partition is looked up or created.
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
	lim, p, _, err := l.get(key)
	switch {
	case lim == nil && err != nil:
		return err
	case lim == nil || p == nil: // no partition can be made now; Overflow did not make the grant
		return fmt.Errorf("%w %q: MaxPartitions are busy: the settlement is not made", ErrNoPartition, key)
	}
	defer p.done()
	return control.Settle(ctx, lim, lease, actual)
}

// Settle is the partitioned limiter's Settle for the key.
func (b bound) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	return b.l.Settle(ctx, b.key, lease, actual)
}
