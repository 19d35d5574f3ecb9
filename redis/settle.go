package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/check"
)

// grantTag is the Grows of a configuration's grants (its infos[0]): it
// says their GrowsAfter (g's; unknown when g is nil) and names the shape
// whose limiters made them, so that Settle recognises a grant made under a
// configuration since replaced.
type grantTag struct {
	g     backend.Grows
	owner *shape
	pm    *params
}

func (t *grantTag) GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool) {
	if t.g == nil {
		return 0, false
	}
	return t.g.GrowsAfter(remaining, resetAfter, now)
}

// tag makes pm's grants say g and name owner.
func (pm *params) tag(g backend.Grows, owner *shape) {
	pm.infos.SetGrows(&grantTag{g: g, owner: owner, pm: pm})
}

// Settle settles lease, a reservation of a grant of this limiter
// (control.Reserve), at the actual cost, as control.Settle says, in one
// script run: at actual permits where it reserved n, the script takes
// back n - actual from where the grant was counted, as Refund does (the
// grant's instant is its token), or charges actual - n at the script's
// now (a token bucket in debt, a window over its limit), each as its
// algorithm's model does in memory. The remembered refusal is forgotten
// either way, so that the next request is answered by Redis, with the
// RetryAfter the settlement made. A grant made under a configuration since
// replaced is charged and gives nothing back (stricter), as in memory. A
// concurrency limiter has nothing to settle (errors.ErrUnsupported). A
// FailOpen grant counted nothing, and settles as nothing; a grant of the
// fallback (WithFallback) is settled there when it can settle
// (control.Settle). A lease of another limiter of the same Factory (or of
// a handle on the same key) is taken as this one's: settle a lease on the
// limiter that made it (partitioned's For(key) does). A failed call wraps
// ErrUnavailable: the settlement was then made once or not at all.
func (l *Limiter) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	grant, n, err := lease.CheckSettle(ctx, actual)
	if err != nil {
		return err
	}
	if l.release {
		return &backend.NoCost{Backend: "redis", Config: l.params().cfg}
	}
	if !l.settles {
		return fmt.Errorf("redis: %T has no settlement: %w", l.params().cfg, errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.isClosed() {
		return ratelimit.ErrClosed
	}
	o := grant.Outcome()
	if o == &failedOpen[0] { // counted nothing: nothing to settle
		return lease.ClaimSettlement()
	}
	if t, ok := o.Grows.(*grantTag); !ok || t.owner != l.shape || o != &t.pm.infos[0] {
		// Not ours: the fallback's, when it granted while Redis failed.
		if l.o.fallback != nil {
			return control.Settle(ctx, l.o.fallback, lease, actual)
		}
		return fmt.Errorf("%w: not a grant of this limiter", ratelimit.ErrInvalidLease)
	}
	pm := l.params()
	at, current := (&pm.infos[0]).Token(grant)
	if err := lease.ClaimSettlement(); err != nil {
		return err
	}
	switch {
	case pm.unlimited || actual == n:
		return nil
	case actual < n:
		if !current || at == 0 {
			return nil // a replaced configuration's grant, or a status check's: nothing to give back
		}
		_, err = l.call(ctx, l.localNow(), opRefund, int64(n-actual), int64(at))
	default:
		_, err = l.call(ctx, l.localNow(), opCharge, min(int64(actual-n), check.MaxLimit), l.tail("-")...)
	}
	if err != nil {
		if err := ended(ctx); err != nil {
			return err
		}
		l.failed(err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l.refusal.Store(nil)
	return nil
}
