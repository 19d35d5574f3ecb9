package ratelimit

import (
	"fmt"
	"time"
)

// Reason says why a lease was refused.
type Reason uint8

const (
	// ReasonNone: not refused. A granted lease has it, and so does the zero
	// Lease that comes with an error (no decision was made).
	ReasonNone        Reason = iota
	ReasonLimit              // the limit is reached
	ReasonQueueFull          // Wait would have to queue and the queue is full
	ReasonEvicted            // a NewestFirst queue dropped this waiter to make room
	ReasonDeadline           // the permits cannot be had before the ctx deadline
	ReasonClosed             // the limiter was closed while the request waited
	ReasonUnavailable        // the backend could not decide and the policy is to refuse
	ReasonNoPartition        // a partitioned limiter is at its MaxPartitions, all busy
)

var reasonNames = [...]string{"none", "limit reached", "queue full", "evicted", "deadline unreachable", "closed", "backend unavailable", "no partition available"}

// String is the reason in a few words, for logs: "limit reached".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Lease is the answer to a request for permits: granted (Acquired) or
// refused (with a Reason and, when known, a RetryAfter), and the figures
// HTTP headers need. It is a small value, safe to copy; the copies share
// one Release. The zero Lease, returned with every error, is no decision:
// not acquired, ReasonNone, all figures zero.
//
// A limiter makes its leases with an Outcome.
//
// A lease is four words, and what the leases of one outcome share sits
// behind one pointer: a fifth word (a grant's token apart from a refusal's
// RetryAfter) makes a lease several times slower to return from a call,
// since Go returns up to four words in registers (BenchmarkLeaseWords).
type Lease struct {
	remaining  int64
	x          int64 // a grant's token; a refusal's RetryAfter, negative when unknown
	resetAfter time.Duration
	o          *Outcome
}

// Outcome is what the leases of one outcome of a limiter share: its
// capacity, grant or refusal (and why), what a grant's Release does and
// what its GrowsAfter says. A limiter makes one Outcome per outcome, once
// (or one per held resource, embedded in a record of its own), and each
// decision's lease with Lease, which allocates nothing. An Outcome must not
// change once it has made a lease.
type Outcome struct {
	// Limit is the capacity its leases report (Lease.Limit): -1 for a
	// limiter without a limit.
	Limit int64
	// Reason is ReasonNone for grants, else the reason of the refusals.
	Reason Reason
	// Releaser, when not nil, is what a grant's Release calls, with the
	// lease's token: for grants that hold permits until released. Every
	// copy of a lease calls it, so it must act only on a token's first call.
	Releaser interface{ Release(token uint64) }
	// Grows, when not nil, says a grant's GrowsAfter, at the grant's
	// Remaining and ResetAfter.
	Grows interface {
		GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool)
	}
}

// Lease makes a lease of o with its figures: for a grant, token is what
// its Releaser is passed (and what Token returns); for a refusal,
// retryAfter is its RetryAfter, unknown when negative. A Reason beyond the
// declared ones is reported as ReasonLimit.
func (o *Outcome) Lease(remaining int64, retryAfter, resetAfter time.Duration, token uint64) Lease {
	if o.Reason == ReasonNone {
		return Lease{remaining: remaining, x: int64(token), resetAfter: resetAfter, o: o}
	}
	return Lease{remaining: remaining, x: int64(retryAfter), resetAfter: resetAfter, o: o}
}

// Token returns the token of l when l is a grant made by o: the limiter
// that made a grant so recognises it (to refund it, say); ok is false for
// any other lease.
func (o *Outcome) Token(l Lease) (token uint64, ok bool) {
	if l.o != o || o.Reason != ReasonNone {
		return 0, false
	}
	return uint64(l.x), true
}

// Outcome is the Outcome l was made by; nil for the zero Lease.
func (l Lease) Outcome() *Outcome { return l.o }

// Acquired reports whether the permits were granted.
func (l Lease) Acquired() bool { return l.o != nil && l.o.Reason == ReasonNone }

// Reason says why the lease was refused; ReasonNone when it was granted, or
// for the zero Lease.
func (l Lease) Reason() Reason {
	if l.o == nil {
		return ReasonNone
	}
	if l.o.Reason >= Reason(len(reasonNames)) {
		return ReasonLimit
	}
	return l.o.Reason
}

// RetryAfter is, for a refused lease, how long until the same request could
// be granted (weighted by the permits asked and, for a queue refusal, by the
// permits queued ahead). ok is false for granted leases, the zero Lease,
// and when the wait cannot be known (a concurrency limit in memory, whose
// permits come back when their holders release them).
func (l Lease) RetryAfter() (d time.Duration, ok bool) {
	if l.o == nil || l.o.Reason == ReasonNone || l.x < 0 {
		return 0, false
	}
	return time.Duration(l.x), true
}

// Remaining is the number of permits still available after this decision;
// -1 when there is no limit (see Limit).
func (l Lease) Remaining() int64 { return l.remaining }

// Limit is the limiter's capacity: the most permits available at once. It
// is -1 for a limiter without a limit (partitioned.NoLimit, FromRate of a
// rate.Inf limiter), and 0 for the zero Lease.
func (l Lease) Limit() int64 {
	if l.o == nil {
		return 0
	}
	return l.o.Limit
}

// ResetAfter is how long until all Limit permits are available again if
// nothing else happens.
func (l Lease) ResetAfter() time.Duration { return l.resetAfter }

// GrowsAfter is, for a grant made at now (on its limiter's clock), the
// time until the permits available next grow: the t of the RateLimit HTTP
// header field (each algorithm's package says what it is). ok is false for
// a refusal, the zero Lease, and a grant whose limiter does not know it.
func (l Lease) GrowsAfter(now time.Time) (d time.Duration, ok bool) {
	if !l.Acquired() || l.o.Grows == nil {
		return 0, false
	}
	return l.o.Grows.GrowsAfter(l.remaining, l.resetAfter, now)
}

// Release gives back the permits of a concurrency lease; for rate algorithms
// it does nothing, since their permits come back with time. It is idempotent,
// also on copies of the lease, and does nothing on a refused lease.
func (l Lease) Release() {
	if l.Acquired() && l.o.Releaser != nil {
		l.o.Releaser.Release(uint64(l.x))
	}
}

// String is a short description for logs.
func (l Lease) String() string {
	if l.Acquired() {
		return fmt.Sprintf("granted (remaining %d of %d)", l.Remaining(), l.Limit())
	}
	if l.Reason() == ReasonNone {
		return "no decision"
	}
	if d, ok := l.RetryAfter(); ok {
		return fmt.Sprintf("refused: %v, retry after %v", l.Reason(), d)
	}
	return fmt.Sprintf("refused: %v", l.Reason())
}
