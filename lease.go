package ratelimit

import (
	"fmt"
	"time"
)

// Reason says why a lease was refused.
type Reason uint8

const (
	ReasonNone        Reason = iota // the lease was granted
	ReasonLimit                     // the limit is reached
	ReasonQueueFull                 // Wait would have to queue and the queue is full (or disabled)
	ReasonEvicted                   // a NewestFirst queue dropped this waiter to make room
	ReasonDeadline                  // the permits cannot be had before the ctx deadline
	ReasonClosed                    // the limiter was closed while the request waited
	ReasonUnavailable               // the backend could not decide and the policy is to refuse
	ReasonNoPartition               // a partitioned limiter is at its MaxPartitions, all busy
)

var reasonNames = [...]string{"none", "limit reached", "queue full", "evicted", "deadline unreachable", "closed", "backend unavailable", "no partition available"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Decision is one answer of an algorithm's reference model, and the figures a
// Lease carries. Durations are relative to the instant of the decision.
//
// It is kept to four word-sized fields, so that Go passes it in registers
// (a fifth field measured ten times slower to return from a model's Step);
// the limiter's capacity, which a lease also carries, is the backend's.
type Decision struct {
	Remaining int64 // permits still available after this decision
	// RetryAfter, for a refusal, is the shortest wait after which the same
	// request would be granted if nothing else happened; negative when unknown
	// (concurrency limits, whose permits come back on Release).
	RetryAfter time.Duration
	// ResetAfter is how long until all Limit permits are available again if
	// nothing else happens.
	ResetAfter time.Duration
	Granted    bool
}

// Releaser gives back what a lease holds. Release(token) must be idempotent:
// only its first call for a token has an effect.
type Releaser interface {
	Release(token uint64)
}

// Lease is the answer to a request for permits. It is a small value; leases
// of rate algorithms carry no pointer and cost no allocation.
// The zero Lease is a refusal with no figures.
type Lease struct {
	d      Decision
	limit  int64
	reason Reason
	rel    Releaser
	token  uint64
}

// NewLease builds a lease from a decision of a limiter of capacity limit,
// for backends and user limiters. reason is ignored for granted decisions
// and defaults to ReasonLimit for refused ones. rel, when not nil, is called
// by Release with token.
func NewLease(d Decision, limit int64, reason Reason, rel Releaser, token uint64) Lease {
	if d.Granted {
		reason = ReasonNone
	} else if reason == ReasonNone {
		reason = ReasonLimit
	}
	return Lease{d: d, limit: limit, reason: reason, rel: rel, token: token}
}

// Acquired reports whether the permits were granted.
func (l Lease) Acquired() bool { return l.d.Granted }

// Reason says why the lease was refused; ReasonNone when it was granted.
func (l Lease) Reason() Reason { return l.reason }

// RetryAfter is, for a refused lease, how long until the same request could
// be granted (weighted by the permits asked and, for a queue refusal, by the
// permits queued ahead). ok is false for granted leases and when the wait
// cannot be known (concurrency limits in memory).
func (l Lease) RetryAfter() (d time.Duration, ok bool) {
	if l.d.Granted || l.d.RetryAfter < 0 {
		return 0, false
	}
	return l.d.RetryAfter, true
}

// Remaining is the number of permits still available after this decision.
func (l Lease) Remaining() int64 { return l.d.Remaining }

// Limit is the limiter's capacity: the most permits available at once.
func (l Lease) Limit() int64 { return l.limit }

// ResetAfter is how long until all Limit permits are available again if
// nothing else happens (for HTTP headers such as RateLimit's t=).
func (l Lease) ResetAfter() time.Duration { return l.d.ResetAfter }

// Release gives back the permits of a concurrency lease; for rate algorithms
// it does nothing, since their permits come back with time. It is idempotent,
// also on copies of the lease, and does nothing on a refused lease.
func (l Lease) Release() {
	if l.rel != nil && l.d.Granted {
		l.rel.Release(l.token)
	}
}

// String is a short description for logs.
func (l Lease) String() string {
	if l.d.Granted {
		return fmt.Sprintf("granted (remaining %d of %d)", l.d.Remaining, l.limit)
	}
	if d, ok := l.RetryAfter(); ok {
		return fmt.Sprintf("refused: %v, retry after %v", l.reason, d)
	}
	return fmt.Sprintf("refused: %v", l.reason)
}
