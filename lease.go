package ratelimit

import (
	"fmt"
	"sync"
	"time"

	"github.com/limitkit/ratelimit/internal/leases"
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

// Every reason has a name, and the leases of the backends one Info each.
var _ [len(reasonNames)]struct{} = [leases.Reasons]struct{}{}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Decision is one answer of an algorithm's reference model (its Step),
// and the figures of the Lease a backend makes of it. Durations are
// relative to the instant of the decision.
//
// It is kept to four word-sized fields, so that Go passes it in registers;
// the limiter's capacity, which a lease also carries, is the backend's.
type Decision struct {
	Remaining int64 // permits still available after this decision
	// RetryAfter, for a refusal, is the shortest wait after which the same
	// request would be granted if nothing else happened; negative when
	// unknown (a concurrency limit, whose permits come back on Release).
	// The lease reports a negative RetryAfter as unknown (ok == false).
	RetryAfter time.Duration
	// ResetAfter is how long until all permits are available again if
	// nothing else happens.
	ResetAfter time.Duration
	Granted    bool
}

// Lease is the answer to a request for permits: granted (Acquired) or
// refused (with a Reason and, when known, a RetryAfter), and the figures
// HTTP headers need. It is a small value, safe to copy; the copies share
// one Release. The zero Lease, returned with every error, is no decision:
// not acquired, ReasonNone, all figures zero.
//
// A limiter written outside this module makes its leases with NewLease.
type Lease leases.Lease

// NewLease returns the lease of decision d by a limiter of capacity limit,
// for a limiter of one's own (see ratelimittest.TestLimiter). A refusal
// carries reason (ReasonLimit when reason is ReasonNone), and d.RetryAfter
// as its RetryAfter, unknown when negative. A grant that holds permits until
// released passes release: the lease's first Release, of the lease or any
// copy, calls it, and later ones do nothing; release is nil otherwise, and
// ignored for refusals. Each call allocates; the module's own limiters
// make their leases without.
func NewLease(d Decision, limit int64, reason Reason, release func()) Lease {
	var rel leases.Releaser
	if release != nil && d.Granted {
		rel = &once{f: release}
	}
	return Lease(leases.New(d.Granted, uint8(reason), limit, d.Remaining, d.RetryAfter, d.ResetAfter, rel, 0))
}

// once is the Releaser of NewLease: it calls f the first time.
type once struct {
	o sync.Once
	f func()
}

func (o *once) Release(uint64) { o.o.Do(o.f) }

// Acquired reports whether the permits were granted.
func (l Lease) Acquired() bool { return l.lease().Acquired() }

// Reason says why the lease was refused; ReasonNone when it was granted, or
// for the zero Lease.
func (l Lease) Reason() Reason { return Reason(l.lease().Reason()) }

// RetryAfter is, for a refused lease, how long until the same request could
// be granted (weighted by the permits asked and, for a queue refusal, by the
// permits queued ahead). ok is false for granted leases, the zero Lease,
// and when the wait cannot be known (a concurrency limit in memory, whose
// permits come back when their holders release them).
func (l Lease) RetryAfter() (d time.Duration, ok bool) { return l.lease().RetryAfter() }

// Remaining is the number of permits still available after this decision;
// -1 when there is no limit (see Limit).
func (l Lease) Remaining() int64 { return l.lease().Remaining() }

// Limit is the limiter's capacity: the most permits available at once. It
// is -1 for a limiter without a limit (partitioned.NoLimit, FromRate of a
// rate.Inf limiter), and 0 for the zero Lease.
func (l Lease) Limit() int64 { return l.lease().Limit() }

// ResetAfter is how long until all Limit permits are available again if
// nothing else happens.
func (l Lease) ResetAfter() time.Duration { return l.lease().ResetAfter() }

// Release gives back the permits of a concurrency lease; for rate algorithms
// it does nothing, since their permits come back with time. It is idempotent,
// also on copies of the lease, and does nothing on a refused lease.
func (l Lease) Release() { l.lease().Release() }

func (l Lease) lease() leases.Lease { return leases.Lease(l) }

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
