package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit/waittrace"
)

// chain is the Limiter returned by Chain.
type chain struct {
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
// RetryAfter and reason reach the caller) or the error: a member that can
// refund (its Refund method, found through Unwrap as package control finds
// it) is refunded, and the lease of any other member is released.
// Releasing gives concurrency permits back, but a rate limiter that cannot
// refund keeps what it granted (its permits come back with time), so put
// such a limiter last, where no later member can refuse after it (memory
// and redis limiters and chains refund; FromRate's does not). The give-back
// runs even when ctx ended during the attempt (the members get a ctx that
// is not cancelled). When a Refund fails, that member keeps its grant, and
// Acquire returns the Refund's error (joined to the member's error, if any)
// together with the refusing lease.
//
// A negative permits (ErrInvalidPermits), a nil ctx (ErrNilContext), a done
// one (ctx.Err()), an empty chain or a nil member (ErrInvalidConfig), and
// permits over the capacity of a member that can tell it (its CheckPermits
// method: memory and redis limiters, chains) (ErrExceedsLimit) are reported
// before any member is asked. permits == 0 is a status check that takes
// nothing: granted when every member has at least one permit.
//
// The granted lease's Release releases every member's lease; its figures
// are those of the member with the fewest permits remaining, and its
// GrowsAfter that member's.
//
// Wait never holds permits of one limiter while it waits on another: it
// tries the whole chain, and on a refusal gives everything back (as Acquire
// does), waits on the refusing member alone (its Wait, on its clock, which
// refuses at once when ctx's deadline comes too soon), and tries the whole
// chain again with that member's grant in hand, until ctx is done. When a
// member refuses for its limit and ctx has a deadline, the members after it
// are first asked for a status check (Acquire of 0 permits): when one of
// them has no permit before the deadline (on the system clock), Wait
// refuses at once (ReasonDeadline, with that member's figures), without
// waiting on the refusing member. (A member whose Wait refuses for its
// limit without waiting, a limiter of one's own, is waited for: the chain
// sleeps until its RetryAfter on the system clock.) Wait(ctx, 0) so waits
// until every member has at least one permit, and takes nothing. The Waits
// it makes of its members are told to ctx's waittrace hooks as the chain's
// one Wait.
//
// A chain refunds its own grants (Refund), reports the error a call would
// return (CheckPermits) and is idle when every member is (IdleFor). Its
// Unwrap returns its members, as errors.Join's error does; package
// control, which follows an Unwrap to one limiter, does not walk it, so
// Reset, Reconfigure and Stats are not reached through a chain.
func Chain(limiters ...Limiter) Limiter {
	c := &chain{ls: append([]Limiter(nil), limiters...)}
	if len(c.ls) == 0 {
		c.invalid = fmt.Errorf("%w: empty chain", ErrInvalidConfig)
	}
	for i, l := range c.ls {
		if l == nil {
			c.invalid = fmt.Errorf("%w: chain member %d is nil", ErrInvalidConfig, i)
			break
		}
	}
	return c
}

// Unwrap returns a copy of the chain's members.
func (c *chain) Unwrap() []Limiter { return append([]Limiter(nil), c.ls...) }

// IdleFor reports the chain idle when every member can tell it is idle
// (an IdleFor method, found through Unwrap), for as long as the member
// idle the shortest time. A member that cannot tell keeps the chain busy.
func (c *chain) IdleFor() (time.Duration, bool) {
	if c.invalid != nil {
		return 0, false
	}
	least := time.Duration(math.MaxInt64)
	for _, l := range c.ls {
		il, ok := find[interface{ IdleFor() (time.Duration, bool) }](l)
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

// Acquire takes permits from every limiter now, or from none.
func (c *chain) Acquire(ctx context.Context, permits int) (Lease, error) {
	if err := c.check(ctx, permits); err != nil {
		return Lease{}, err
	}
	lease, _, err := c.acquire(ctx, permits, -1, Lease{})
	return lease, err
}

// check reports what makes a call invalid, before any member is asked.
func (c *chain) check(ctx context.Context, permits int) error {
	if err := c.CheckPermits(permits); err != nil {
		return err
	}
	if ctx == nil {
		return ErrNilContext
	}
	return ctx.Err()
}

// CheckPermits reports the error a call for permits returns whatever the
// members' state: the chain's own (ErrInvalidConfig for an empty chain or
// a nil member, ErrInvalidPermits), or the first member's that can tell
// and refuses permits. A member that cannot tell gets its error once the
// members before it have granted, and they are given back their grants.
func (c *chain) CheckPermits(permits int) error {
	if c.invalid != nil {
		return c.invalid
	}
	if permits < 0 {
		return fmt.Errorf("%w: %d is negative", ErrInvalidPermits, permits)
	}
	for _, l := range c.ls {
		if pc, ok := find[interface{ CheckPermits(int) error }](l); ok {
			if err := pc.CheckPermits(permits); err != nil {
				return err
			}
		}
	}
	return nil
}

// acquire returns the chain's lease, or the refusing lease and the index
// of its member. When at is a member's index, held is that member's grant,
// taken in place of asking it.
func (c *chain) acquire(ctx context.Context, permits, at int, held Lease) (Lease, int, error) {
	g := &chainGrant{c: c, leases: make([]Lease, 0, len(c.ls))}
	for i, l := range c.ls {
		lease, err := held, error(nil)
		if i != at {
			lease, err = l.Acquire(ctx, permits)
		}
		if err != nil || !lease.Acquired() {
			bg := context.WithoutCancel(ctx)
			uerr := g.undo(bg, permits)
			if at > i { // the grant in hand, not reached yet
				uerr = errors.Join(uerr, giveBack(bg, c.ls[at], at, held, permits))
			}
			if uerr != nil {
				err = errors.Join(err, uerr)
			}
			return lease, i, err
		}
		g.leases = append(g.leases, lease)
	}
	// The chain's figures are its tightest member's: the least Remaining of
	// the members with a limit (a Limit of -1 is none).
	best := g.leases[0]
	var reset time.Duration
	for _, l := range g.leases {
		if best.Limit() < 0 || (l.Limit() >= 0 && l.Remaining() < best.Remaining()) {
			best = l
		}
		reset = max(reset, l.ResetAfter())
	}
	g.o = Outcome{Limit: best.Limit(), Releaser: g}
	if best.Acquired() && best.o.Grows != nil {
		g.best = best // its t is the chain's: the tightest member's
		g.o.Grows = g
	}
	return g.o.Lease(best.Remaining(), 0, reset, 0), -1, nil
}

// Refund gives back the permits of lease, a grant of this chain, to every
// member in reverse order, as Acquire does when a member refuses: a member
// that can refund is refunded, the lease of any other is released. A grant
// of a Chain of the same members, in the same order, is taken as this
// one's. A lease is refunded once; refunding it again, refunding a refusal
// or a lease of another limiter does nothing. The members' errors are joined. A nil ctx
// is ErrNilContext and a negative permits ErrInvalidPermits; ctx is passed
// to the members as it is.
func (c *chain) Refund(ctx context.Context, lease Lease, permits int) error {
	if ctx == nil {
		return ErrNilContext
	}
	if permits < 0 {
		return fmt.Errorf("%w: %d is negative", ErrInvalidPermits, permits)
	}
	if !lease.Acquired() {
		return nil
	}
	g, ok := lease.o.Releaser.(*chainGrant)
	if !ok || !c.same(g.c) || lease.o != &g.o || !g.refunded.CompareAndSwap(false, true) {
		return nil
	}
	return g.undo(ctx, permits)
}

// same reports whether o is c or a chain of the same members in the same
// order (a Chain made per request of per-key limiters, as a
// partitioned.Func may make it): a grant of either is a grant of both,
// each member's lease its own. Members compare as Go's == does, and a
// member that == cannot compare (a func, or a struct holding one or a
// slice) is the same only as itself in c.
func (c *chain) same(o *chain) bool {
	if o == c {
		return true
	}
	if len(o.ls) != len(c.ls) {
		return false
	}
	for i, l := range c.ls {
		// Value.Comparable looks into the interfaces a value holds, where
		// == would panic on a func or a slice.
		if reflect.TypeOf(l) != reflect.TypeOf(o.ls[i]) || !reflect.ValueOf(l).Comparable() || !reflect.ValueOf(o.ls[i]).Comparable() || l != o.ls[i] {
			return false
		}
	}
	return true
}

// Wait takes permits from every limiter, waiting on each refusing one.
func (c *chain) Wait(ctx context.Context, permits int) (Lease, error) {
	if err := c.check(ctx, permits); err != nil {
		return Lease{}, err
	}
	ctx, span := waittrace.Begin(ctx, permits)
	lease, err := c.wait(ctx, permits, span)
	if span != nil { // no hooks: no clock to read
		span.Done(time.Now(), lease.Acquired(), err)
	}
	return lease, err
}

// wait is Wait after its arguments were checked.
func (c *chain) wait(ctx context.Context, permits int, span *waittrace.Span) (Lease, error) {
	at, held := -1, Lease{}
	for {
		lease, refuser, err := c.acquire(ctx, permits, at, held)
		if err != nil || lease.Acquired() {
			return lease, err
		}
		if err := ctx.Err(); err != nil {
			return Lease{}, err
		}
		if lease.Reason() == ReasonLimit {
			if late, ok := c.tooLate(ctx, refuser); ok {
				return late, nil
			}
		}
		held, err = c.ls[refuser].Wait(ctx, permits)
		if err != nil {
			return held, err
		}
		if held.Acquired() {
			at = refuser
			continue
		}
		// A member whose Wait refuses for its limit does not wait (a
		// limiter of one's own): sleep until its RetryAfter, on the system
		// clock, and try again.
		d, known := held.RetryAfter()
		if held.Reason() != ReasonLimit || !known {
			return held, nil
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
			o := &Outcome{Limit: held.Limit(), Reason: ReasonDeadline}
			return o.Lease(held.Remaining(), d, held.ResetAfter(), 0), nil
		}
		span.Join(time.Now())
		if err := sleep(ctx, d); err != nil {
			return Lease{}, err
		}
		span.Leave(time.Now()) // a member's Wait that queues next tells its own time
		at = -1
	}
}

// tooLate returns the chain's refusal for ctx's deadline when a member
// after refuser (which refused for its limit; those before it granted)
// tells that it has no permit before it: its status check (Acquire of 0
// permits) is refused with a RetryAfter longer than the time left (on the
// system clock, as the chain's own sleep), which no request of more
// permits waits less than. ok is false without a deadline, and when no
// such member is found; a member's error there tells nothing (its Acquire
// in the next round reports it).
func (c *chain) tooLate(ctx context.Context, refuser int) (Lease, bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return Lease{}, false
	}
	for _, l := range c.ls[refuser+1:] {
		s, err := l.Acquire(ctx, 0)
		if err != nil {
			continue
		}
		if s.Acquired() {
			s.Release() // a status check holds nothing; a member of the caller's own might
			continue
		}
		if d, known := s.RetryAfter(); known && time.Until(deadline) < d {
			o := &Outcome{Limit: s.Limit(), Reason: ReasonDeadline}
			return o.Lease(s.Remaining(), d, s.ResetAfter(), 0), true
		}
	}
	return Lease{}, false
}

// chainGrant is what a chain's granted lease holds: the leases of its
// members, in order. Its Release releases them in reverse order (each is
// idempotent).
type chainGrant struct {
	c        *chain
	o        Outcome
	leases   []Lease
	best     Lease // the member's grant whose figures are the chain's
	refunded atomic.Bool
}

// GrowsAfter is the t of the chain's grant: its tightest member's.
func (g *chainGrant) GrowsAfter(_ int64, _ time.Duration, now time.Time) (time.Duration, bool) {
	return g.best.GrowsAfter(now)
}

func (g *chainGrant) Release(uint64) {
	for i := len(g.leases) - 1; i >= 0; i-- {
		g.leases[i].Release()
	}
}

// undo gives back the grants of g.leases, made by the first members of the
// chain, in reverse order: Refund for a member that can, Release for the
// others.
func (g *chainGrant) undo(ctx context.Context, permits int) error {
	var errs []error
	for i := len(g.leases) - 1; i >= 0; i-- {
		errs = append(errs, giveBack(ctx, g.c.ls[i], i, g.leases[i], permits))
	}
	return errors.Join(errs...)
}

// giveBack gives member i, l, back its grant lease: a Refund when l can,
// else a Release. A status check (permits == 0) took nothing.
func giveBack(ctx context.Context, l Limiter, i int, lease Lease, permits int) error {
	if permits == 0 {
		return nil
	}
	r, ok := find[refunder](l)
	if !ok {
		lease.Release()
		return nil
	}
	if err := r.Refund(ctx, lease, permits); err != nil {
		return fmt.Errorf("ratelimit: chain member %d kept its grant: %w", i, err)
	}
	return nil
}

type refunder interface {
	Refund(ctx context.Context, lease Lease, permits int) error
}

// find returns l, or the first limiter its Unwrap chain reaches, that is a
// T: the walk package control makes (see its doc), for the chain's own use.
func find[T any](l Limiter) (T, bool) {
	for range maxUnwrap {
		if t, ok := l.(T); ok {
			return t, true
		}
		u, ok := l.(interface{ Unwrap() Limiter })
		if !ok {
			break
		}
		if l = u.Unwrap(); l == nil {
			break
		}
	}
	var zero T
	return zero, false
}

// maxUnwrap bounds a walk through Unwrap, against a wrapper that unwraps to
// itself.
const maxUnwrap = 100
