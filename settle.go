package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrInvalidLease is wrapped by the error of a settlement (control.Settle)
// that cannot be made, which changes nothing: the lease is a refusal, the
// zero Lease or a grant that was not reserved (see Lease.Reserve), it was
// settled already, or it is a grant of another limiter.
var ErrInvalidLease = errors.New("ratelimit: lease cannot be settled")

// Reserve returns l, a grant of permits, as a lease that can be
// settled once with the actual cost of the work it admitted
// (control.Settle; control.Reserve makes such leases): it records the
// permits and whether it has been settled. It has l's figures, and its
// Release and GrowsAfter are l's. It allocates one small record, so a
// lease that is never settled costs nothing of it: only reserving calls
// make one. A refusal, the zero Lease, or a negative permits is returned
// as it is (no settlement can be made of it).
//
// A limiter's Settle method checks the call (CheckSettle) and marks the
// record settled (ClaimSettlement); a wrapper that hands its own limiter
// another lease than the one it was given (a Chain's members, each with
// its own grant) passes that lease's Reserve.
func (l Lease) Reserve(permits int) Lease {
	if !l.Acquired() || permits < 0 {
		return l
	}
	r := &reservation{grant: l, permits: permits}
	r.o = Outcome{Limit: l.Limit(), Releaser: r}
	if l.o.Grows != nil {
		r.o.Grows = r
	}
	return r.o.Lease(l.remaining, 0, l.resetAfter, 0)
}

// reservation is the record of a lease made by Reserve.
type reservation struct {
	o       Outcome
	grant   Lease
	permits int
	settled atomic.Bool
}

// Release releases the grant.
func (r *reservation) Release(uint64) { r.grant.Release() }

// GrowsAfter is the grant's.
func (r *reservation) GrowsAfter(_ int64, _ time.Duration, now time.Time) (time.Duration, bool) {
	return r.grant.GrowsAfter(now)
}

// reservationOf is the record of l, a lease made by Reserve; nil for any
// other lease.
func reservationOf(l Lease) *reservation {
	if l.o == nil {
		return nil
	}
	if r, ok := l.o.Releaser.(*reservation); ok && l.o == &r.o {
		return r
	}
	return nil
}

// Reservation returns the grant and the permits that Reserve recorded in
// l; ok is false for a lease that Reserve did not make.
func (l Lease) Reservation() (grant Lease, permits int, ok bool) {
	if r := reservationOf(l); r != nil {
		return r.grant, r.permits, true
	}
	return Lease{}, 0, false
}

// Settled reports whether l, a lease made by Reserve, has been settled
// (ClaimSettlement); false for any other lease.
func (l Lease) Settled() bool {
	r := reservationOf(l)
	return r != nil && r.settled.Load()
}

// ClaimSettlement marks l, a lease made by Reserve, settled, for the
// limiter that settles it, and reports an error wrapping ErrInvalidLease
// when it cannot: l is not such a lease (a refusal, the zero Lease, a grant
// that was not reserved), or it was settled already (by this call's
// concurrent twin, say: exactly one of them succeeds). A Settle method
// calls it once everything else it checks is valid, just before it applies
// the settlement, so that a settlement refused changes nothing, the lease
// included.
func (l Lease) ClaimSettlement() error {
	r := reservationOf(l)
	if r == nil {
		return notReserved(l)
	}
	if !r.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: it was settled already", ErrInvalidLease)
	}
	return nil
}

// notReserved is the error of a settlement of l, a lease that Reserve did
// not make: it says which (a refusal, the zero Lease, a grant that was not
// reserved), wrapping ErrInvalidLease.
func notReserved(l Lease) error {
	switch {
	case l.o == nil:
		return fmt.Errorf("%w: the zero Lease is no decision", ErrInvalidLease)
	case !l.Acquired():
		return fmt.Errorf("%w: a refusal (%v) took nothing", ErrInvalidLease, l.Reason())
	}
	return fmt.Errorf("%w: a grant that was not reserved (see control.Reserve)", ErrInvalidLease)
}

// CheckSettle is what every Settle method checks first, of a settlement
// of l at actual permits, in this order: a nil ctx (ErrNilContext), a
// negative actual (ErrInvalidPermits, naming it), and a lease that Reserve
// did not make (ErrInvalidLease); it returns l's grant and permits.
func (l Lease) CheckSettle(ctx context.Context, actual int) (grant Lease, permits int, err error) {
	if ctx == nil {
		return Lease{}, 0, ErrNilContext
	}
	if actual < 0 {
		return Lease{}, 0, fmt.Errorf("%w: actual cost %d is negative", ErrInvalidPermits, actual)
	}
	grant, permits, ok := l.Reservation()
	if !ok {
		return Lease{}, 0, notReserved(l)
	}
	return grant, permits, nil
}

// noCost reports whether err is a member's answer that its grant, held
// until Release (a concurrency limit's), has no cost to settle: an error
// with a NoCost method (the memory and redis backends' internal/backend.NoCost).
func noCost(err error) bool {
	var nc interface{ NoCost() }
	return errors.As(err, &nc)
}

// settler is the capability package control's Settle reaches.
type settler interface {
	Settle(ctx context.Context, lease Lease, actual int) error
}

// Settle settles lease, a reservation of this chain (or of a Chain of the
// same members, in the same order: see Refund; see Lease.Reserve), at
// actual permits: each member settles its own grant, in order, with the
// permits the chain reserved (through its Settle method, found through
// Unwrap as package control finds it). A member whose grant holds its
// permits until Release (a concurrency limit) has nothing to settle, and
// is left as it is: one with no Settle, or whose Settle says so with an
// error that has a NoCost() method (as the memory and redis backends'
// concurrency limits answer; a plain errors.ErrUnsupported is an error of
// the settlement, joined); a member whose grant is of another kind (a
// Chain's, a wrapper's) settles it. Every other
// member must be able to settle: one with no Settle is an error wrapping
// errors.ErrUnsupported before anything is settled (a nested Chain that
// cannot settle says so when its turn comes, and its error is joined); a
// lease of another limiter, a refusal, a lease settled already or a
// negative actual is an error and settles nothing.
// The members' errors are joined: a member that fails (a Redis outage)
// leaves its grant as it was, and the lease is settled all the same (it is
// never settled twice).
func (c *chain) Settle(ctx context.Context, lease Lease, actual int) error {
	grant, permits, err := lease.CheckSettle(ctx, actual)
	if err != nil {
		return err
	}
	g, ok := grant.o.Releaser.(*chainGrant)
	if !ok || !c.same(g.c) || grant.o != &g.o {
		return fmt.Errorf("%w: not a grant of this chain", ErrInvalidLease)
	}
	ss := make([]settler, len(c.ls))
	for i, l := range c.ls {
		held := g.leases[i].o.Releaser != nil // held until Release
		if ss[i], ok = find[settler](l); !ok && !held {
			return fmt.Errorf("ratelimit: chain member %d (%T) has no Settle: %w", i, l, errors.ErrUnsupported)
		}
	}
	if err := lease.ClaimSettlement(); err != nil {
		return err
	}
	var errs []error
	for i, s := range ss {
		if s == nil {
			continue
		}
		err := s.Settle(ctx, g.leases[i].Reserve(permits), actual)
		if err != nil && !noCost(err) {
			errs = append(errs, fmt.Errorf("ratelimit: chain member %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
