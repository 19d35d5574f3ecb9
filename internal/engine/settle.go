package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/check"
)

// grantTag is the Grows of the grants of a configuration (its infos[0]):
// it says their GrowsAfter (g's; unknown when g is nil), and it names the
// configuration, so that Settle recognises a grant of its limiters made
// under a configuration since replaced (whose outcome is that one's).
type grantTag[S any] struct {
	g backend.Grows
	c *conf[S]
}

func (t *grantTag[S]) GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool) {
	if t.g == nil {
		return 0, false
	}
	return t.g.GrowsAfter(remaining, resetAfter, now)
}

// settles reports the error of settling grant on a limiter of c: one
// whose model has no charge (a concurrency limit), or a grant of another
// limiter (of another Factory, or of another configuration than c's
// limiters have had: see grantTag).
func (c *conf[S]) settles(grant ratelimit.Lease) error {
	if !c.has(Charges) {
		return &backend.NoCost{Backend: "memory", Config: c.cfg}
	}
	o := grant.Outcome()
	t, ok := o.Grows.(*grantTag[S])
	if !ok || o != &t.c.infos[0] || t.c.cur != c.cur {
		return fmt.Errorf("%w: not a grant of this limiter", ratelimit.ErrInvalidLease)
	}
	return nil
}

// Settle settles lease, a reservation of a grant of this limiter (see
// control.Settle): at actual permits where it reserved n, it gives back
// n - actual as Refund does (model.Refund, from the grant's instant), or
// charges actual - n at now (model.Charge). It counts nothing in Stats:
// the grant stays granted. A grant made under a configuration since
// replaced (Reconfigure) is charged, and gives nothing back (stricter, as
// Refund). Queued waiters are examined again after permits came back; a
// charge leaves their turn as it was (a token bucket's reservations keep
// their due instants, and the debt is owed after them). ctx is not read
// past its nil check: nothing here waits.
func (l *limiter[S]) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	grant, n, err := lease.CheckSettle(ctx, actual)
	if err != nil {
		return err
	}
	if err := l.conf().settles(grant); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed
	}
	if err := lease.ClaimSettlement(); err != nil {
		return err
	}
	now := l.now()
	l.syncServe(now)
	m := l.conf().model
	switch {
	case int64(actual) < int64(n):
		// The token is the grant's instant; one under a replaced
		// configuration is not recognised (t.c is not the current conf).
		at, ok := (&l.conf().infos[0]).Token(grant)
		if !ok {
			return nil
		}
		l.state = m.Refund(l.state, now, int64(at), int64(n-actual))
	case actual > n:
		l.flush(now) // a charge delays the bucket
		l.state = m.Charge(l.state, now, min(int64(actual-n), check.MaxLimit))
	default:
		return nil
	}
	if l.x != nil {
		l.x.gen++ // the queue's cached answer (behindQueue) no longer holds
	}
	if l.head != nil && actual < n {
		if l.conf().has(Reserves) {
			l.gaveBack(now)
		}
		l.serve(now)
	}
	return nil
}

// Settle settles lease, a reservation of a grant of key (see
// control.Settle), as a limiter's Settle does: a held key's limiter
// settles it; a key in the table has its state given back
// (model.Refund) or charged (model.Charge). A charge of a key without an
// entry (evicted, back in its initial state) makes one, so that the debt
// is counted; when MaxKeys keys are busy and none is idle, the charge is
// not counted and the settlement is an error (errNoRoom) that changes
// nothing: the lease can be settled again later.
func (k keyOf[S]) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	return k.s.settle(ctx, k.key, lease, actual)
}

// settle is keyOf's Settle.
func (s *store[S]) settle(ctx context.Context, key string, lease ratelimit.Lease, actual int) error {
	grant, n, err := lease.CheckSettle(ctx, actual)
	if err != nil {
		return err
	}
	if err := s.p.cur.Load().settles(grant); err != nil {
		return err
	}
	sh, h, hd, err := s.open(key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if hd != nil {
		return hd.l.Settle(ctx, lease, actual)
	}
	now := s.now()
	s.sync(sh, now)
	i, found := sh.find(key, h)
	if !found && actual > n && !s.admit(sh) {
		return fmt.Errorf("memory: the key %q has no entry to count a charge in, and MaxKeys are busy: %w", key, errNoRoom)
	}
	if err := lease.ClaimSettlement(); err != nil {
		if !found && actual > n {
			s.live.Add(-1) // admitted for nothing
			s.created.Add(-1)
		}
		return err
	}
	m := sh.c.model
	switch {
	case actual < n:
		// A key without an entry is initial: nothing to give back. The
		// token is the grant's instant; one under a replaced
		// configuration is not recognised.
		if at, ok := (&sh.c.infos[0]).Token(grant); ok && found {
			sl := &sh.slots[i]
			sl.s = m.Refund(sl.s, now, int64(at), int64(n-actual))
		}
	case actual > n:
		charge := min(int64(actual-n), check.MaxLimit)
		if found {
			sl := &sh.slots[i]
			sl.s = m.Charge(sl.s, now, charge)
		} else {
			sh.insert(key, h, m.Charge(m.Initial(), now, charge))
		}
	}
	return nil
}

// errNoRoom is wrapped by a settlement that cannot count its charge.
var errNoRoom = errors.New("no room for the key")
