package policy

import (
	"context"

	"github.com/limitkit/ratelimit"
)

// Settle settles lease, a reservation of the key under the policy
// (control.Reserve over Keyed(name, app).For(key)), at the actual cost, on
// that policy's limiter (see control.Settle and partitioned's Settle),
// on behalf of the application, as Acquire is. A grant made before a
// change of configuration of the same algorithm is charged as any other
// (and gives nothing back); one of limiters since replaced (a change of
// algorithm or key kind) is not recognised by the new ones: an error
// wrapping ratelimit.ErrInvalidLease.
func (l keyLimiter) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	e, pk, err := l.k.r.lookup(l.k.name, l.key, l.k.app, true)
	if err != nil {
		return err
	}
	return e.lim.Settle(ctx, pk, lease, actual)
}
