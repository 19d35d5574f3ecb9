package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/leases"
)

// ChainLimiter is the Limiter returned by Chain. It is also a Refunder, so
// chains nest.
type ChainLimiter struct {
	m     *members
	clock Clock // nil: the system clock
}

// members are the limiters of a chain, shared by the copies WithClock makes.
type members struct {
	ls      []Limiter
	invalid error // why the chain cannot decide (empty, a nil member), or nil
}

// Chain returns one limiter that takes permits from each of limiters in
// order, all or nothing: a per-user limit and a global one, say. It keeps
// its own copy of limiters: changing the slice afterwards changes nothing.
//
// Acquire asks each limiter in turn. When one refuses or returns an error
// (ErrExceedsLimit included), Acquire gives back what the limiters before it
// granted, in reverse order, and returns the refusing lease (so its
// RetryAfter and reason reach the caller) or the error: a member that is a
// Refunder is refunded, and the lease of any other member is released.
// Releasing gives concurrency permits back, but a rate limiter that is not a
// Refunder keeps what it granted (its permits come back with time), so put
// such a limiter last, where no later member can refuse after it (memory
// and redis limiters and chains are Refunders; FromRate's is not). The
// give-back runs even when ctx ended during the attempt (the members get a
// ctx that is not cancelled). When a Refund fails, that member keeps its
// grant, and Acquire returns the Refund's error (joined to the member's
// error, if any) together with the refusing lease.
//
// A negative permits (ErrInvalidPermits), a nil ctx (ErrNilContext), a done
// one (ctx.Err()), an empty chain or a nil member (ErrInvalidConfig), and
// permits over the capacity of a member that is a PermitChecker
// (ErrExceedsLimit) are reported before any member is asked. permits == 0 is a status check that
// takes nothing: granted when every member has at least one permit.
//
// The granted lease's Release releases every member's lease; its figures
// are those of the member with the fewest permits remaining.
//
// Wait never holds permits of one limiter while it sleeps on another: it
// tries the whole chain, and on a refusal gives everything back (as
// Acquire does), sleeps until the refusing limiter's RetryAfter (or, when
// that is unknown, as for a concurrency limiter, waits on that limiter alone
// and releases at once), then tries again, until ctx is done. Wait(ctx, 0)
// so waits until every member has at least one permit, and takes nothing.
func Chain(limiters ...Limiter) *ChainLimiter {
	m := &members{ls: append([]Limiter(nil), limiters...)}
	if len(m.ls) == 0 {
		m.invalid = fmt.Errorf("%w: empty chain", ErrInvalidConfig)
	}
	for i, l := range m.ls {
		if l == nil {
			m.invalid = fmt.Errorf("%w: chain member %d is nil", ErrInvalidConfig, i)
			break
		}
	}
	return &ChainLimiter{m: m}
}

// IdleFor reports the chain idle when every member is an Idler and idle,
// for as long as the member idle the shortest time. A member that is not an
// Idler keeps the chain busy for ever (partitioned could never evict it).
func (c *ChainLimiter) IdleFor() (time.Duration, bool) {
	if c.m.invalid != nil {
		return 0, false
	}
	least := time.Duration(math.MaxInt64)
	for _, l := range c.m.ls {
		il, ok := l.(Idler)
		if !ok {
			return 0, false
		}
		d, idle := il.IdleFor()
		if !idle {
			return 0, false
		}
		least = min(least, d)
	}
	return least, true
}

// WithClock returns a copy of the chain whose Wait sleeps on clock (the
// system clock when nil); for tests. The copy shares the members, and each
// refunds the other's leases.
func (c *ChainLimiter) WithClock(clock Clock) *ChainLimiter {
	return &ChainLimiter{m: c.m, clock: clock}
}

// Acquire takes permits from every limiter now, or from none.
func (c *ChainLimiter) Acquire(ctx context.Context, permits int) (Lease, error) {
	if err := c.check(ctx, permits); err != nil {
		return Lease{}, err
	}
	lease, _, err := c.acquire(ctx, permits)
	return lease, err
}

// check reports what makes a call invalid, before any member is asked.
func (c *ChainLimiter) check(ctx context.Context, permits int) error {
	if err := c.CheckPermits(permits); err != nil {
		return err
	}
	return base.CheckContext(ctx)
}

// CheckPermits reports the error a call for permits returns whatever the
// members' state (see PermitChecker): the chain's own (ErrInvalidConfig
// for an empty chain or a nil member, ErrInvalidPermits), or the first
// member's that is a PermitChecker and refuses permits. A member that is
// not cannot tell: a call over its capacity gets its error once the
// members before it have granted, and they are given back their grants.
func (c *ChainLimiter) CheckPermits(permits int) error {
	if c.m.invalid != nil {
		return c.m.invalid
	}
	if permits < 0 {
		return base.CheckPermits(permits, math.MaxInt64)
	}
	for _, l := range c.m.ls {
		if pc, ok := l.(PermitChecker); ok {
			if err := pc.CheckPermits(permits); err != nil {
				return err
			}
		}
	}
	return nil
}

// acquire returns the chain's lease, or the refusing lease and its limiter.
func (c *ChainLimiter) acquire(ctx context.Context, permits int) (Lease, Limiter, error) {
	g := &chainGrant{m: c.m, leases: make([]Lease, 0, len(c.m.ls))}
	for _, l := range c.m.ls {
		lease, err := l.Acquire(ctx, permits)
		if err != nil || !lease.Acquired() {
			if uerr := g.undo(context.WithoutCancel(ctx), permits); uerr != nil {
				err = errors.Join(err, uerr)
			}
			return lease, l, err
		}
		g.leases = append(g.leases, lease)
	}
	// The chain's figures are its tightest member's: the least Remaining of
	// the members with a limit (a Limit of -1 is none).
	best := g.leases[0]
	for _, l := range g.leases[1:] {
		if best.Limit() < 0 || (l.Limit() >= 0 && l.Remaining() < best.Remaining()) {
			best = l
		}
	}
	d := Decision{Remaining: best.Remaining()}
	for _, l := range g.leases {
		d.ResetAfter = max(d.ResetAfter, l.ResetAfter())
	}
	g.info = leases.GrantInfo(best.Limit(), g)
	if leases.Lease(best).Grows() != nil {
		g.best = best // its t is the chain's: the tightest member's
		g.info = leases.WithGrows(g.info, g)
	}
	return Lease(g.info.Grant(d.Remaining, d.ResetAfter, 0)), nil, nil
}

// Refund gives back the permits of lease, a grant of this chain (or of a
// copy made by WithClock), to every member in reverse order, as Acquire does
// when a member refuses: a member that is a Refunder is refunded, the lease
// of any other is released. A lease is refunded once; refunding it again,
// refunding a refusal or a lease of another limiter does nothing. The
// members' errors are joined. A nil ctx is ErrNilContext and a negative
// permits ErrInvalidPermits; ctx is passed to the members as it is.
func (c *ChainLimiter) Refund(ctx context.Context, lease Lease, permits int) error {
	if ctx == nil {
		return ErrNilContext
	}
	if permits < 0 {
		return base.CheckPermits(permits, math.MaxInt64)
	}
	if !lease.Acquired() {
		return nil
	}
	g, ok := lease.lease().Releaser().(*chainGrant)
	if !ok || g.m != c.m || !lease.lease().From(&g.info) || !g.refunded.CompareAndSwap(false, true) {
		return nil
	}
	return g.undo(ctx, permits)
}

// Wait takes permits from every limiter, sleeping while any refuses.
func (c *ChainLimiter) Wait(ctx context.Context, permits int) (Lease, error) {
	return c.WaitObserved(ctx, permits, nil)
}

// WaitObserved is Wait, telling o (when not nil) of the time the call spends
// sleeping or waiting in a member's queue, as ObservableWaiter says.
func (c *ChainLimiter) WaitObserved(ctx context.Context, permits int, o QueueObserver) (Lease, error) {
	if err := c.check(ctx, permits); err != nil {
		return Lease{}, err
	}
	q := base.Queueing[Lease]{O: o, Ctx: ctx, Permits: permits}
	lease, err := c.wait(ctx, permits, &q)
	return q.Leave(c.now, lease, err)
}

// wait is Wait after its arguments were checked.
func (c *ChainLimiter) wait(ctx context.Context, permits int, q *base.Queueing[Lease]) (Lease, error) {
	for {
		lease, refuser, err := c.acquire(ctx, permits)
		if err != nil || lease.Acquired() {
			return lease, err
		}
		d, known := lease.RetryAfter()
		if !known { // permits come back on Release: wait for them in that limiter's queue
			held, err := c.waitIn(ctx, refuser, permits, q)
			if err != nil || !held.Acquired() {
				return held, err
			}
			held.Release()
		} else {
			if deadline, ok := ctx.Deadline(); ok && deadline.Sub(c.now()) < d {
				return Lease(leases.New(false, uint8(ReasonDeadline), lease.Limit(), lease.Remaining(), d, lease.ResetAfter(), nil, 0)), nil
			}
			if d > 0 {
				q.Join(c.now)
			}
			if err := base.Sleep(ctx, c.clock, d); err != nil {
				return Lease{}, err
			}
		}
		if err := ctx.Err(); err != nil {
			return Lease{}, err
		}
	}
}

// waitIn waits for permits in member m's queue: the chain has queued once
// m has (or, when m cannot tell, once the chain waits on it).
func (c *ChainLimiter) waitIn(ctx context.Context, m Limiter, permits int, q *base.Queueing[Lease]) (Lease, error) {
	if q.O == nil {
		return m.Wait(ctx, permits)
	}
	if ow, ok := m.(ObservableWaiter); ok {
		return ow.WaitObserved(ctx, permits, joining{q, c.now})
	}
	q.Join(c.now)
	return m.Wait(ctx, permits)
}

// joining is the observer of a chain's Wait in a member's queue: the
// member's queueing is the chain's, which leaves the queue later.
type joining struct {
	q   *base.Queueing[Lease]
	now func() time.Time
}

func (j joining) Queued(context.Context, int) { j.q.Join(j.now) }

func (j joining) Dequeued(context.Context, int, time.Duration, Lease, error) {}

// chainGrant is what a chain's granted lease holds: the leases of its
// members, in order. Its Release releases them in reverse order (each is
// idempotent).
type chainGrant struct {
	m        *members
	info     leases.Info
	leases   []Lease
	best     Lease // the member's grant whose figures are the chain's
	refunded atomic.Bool
}

// GrowsAfter is the t of the chain's grant: its tightest member's
// (leases.Grows).
func (g *chainGrant) GrowsAfter(_ int64, _ time.Duration, now time.Time) (time.Duration, bool) {
	return leases.Lease(g.best).GrowsAfter(now)
}

func (g *chainGrant) Release(uint64) {
	for i := len(g.leases) - 1; i >= 0; i-- {
		g.leases[i].Release()
	}
}

// undo gives back the grants of g.leases, made by the first members of the
// chain, in reverse order: Refund for a Refunder, Release for the others.
// A status check (permits == 0) took nothing and is not given back.
func (g *chainGrant) undo(ctx context.Context, permits int) error {
	if permits == 0 {
		return nil
	}
	var errs []error
	for i := len(g.leases) - 1; i >= 0; i-- {
		if r, ok := g.m.ls[i].(Refunder); ok {
			if err := r.Refund(ctx, g.leases[i], permits); err != nil {
				errs = append(errs, fmt.Errorf("ratelimit: chain member %d kept its grant: %w", i, err))
			}
			continue
		}
		g.leases[i].Release()
	}
	return errors.Join(errs...)
}

// now reads the chain's clock.
func (c *ChainLimiter) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}
