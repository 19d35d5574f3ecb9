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

// Lease is the answer to a request for permits. It is a value of four
// words, and making one allocates nothing when the backend keeps its
// LeaseInfo values (see Leases). The zero Lease is a refusal with no figures.
//
// Four words is what the compiler keeps in registers; a larger lease is
// built in memory and copied out, and that copy stalled the processor (store
// forwarding) for about half of a memory limiter's decision, in the backend
// and again in the caller. So what the leases of one outcome share (the
// capacity, the reason, the Releaser) sits behind info, and a granted
// lease's release token takes the place of its RetryAfter, which it never
// reports.
type Lease struct {
	remaining  int64
	retryAfter time.Duration // a granted lease's release token
	resetAfter time.Duration
	info       *LeaseInfo
}

// LeaseInfo is the part of a lease that every lease of one outcome of a
// limiter shares: its capacity, whether it was granted and why not, and
// what Release calls. It does not change once made.
type LeaseInfo struct {
	limit  int64
	reason Reason // ReasonNone: granted
	rel    Releaser
}

// GrantInfo returns the LeaseInfo of granted leases of a limiter of
// capacity limit whose Release calls rel.Release with the lease's token.
// A backend keeps it (in a release handle, say) and makes its leases with
// Lease.
func GrantInfo(limit int64, rel Releaser) LeaseInfo {
	return LeaseInfo{limit: limit, rel: rel}
}

// Lease makes a lease of i's outcome with the figures of decision d, which
// must agree with it (a grant, for a GrantInfo); Release passes token to
// the Releaser.
func (i *LeaseInfo) Lease(d Decision, token uint64) Lease {
	l := Lease{remaining: d.Remaining, retryAfter: d.RetryAfter, resetAfter: d.ResetAfter, info: i}
	if i.reason == ReasonNone {
		l.retryAfter = time.Duration(token)
	}
	return l
}

// Token returns the token that lease carries when it was made by i (with
// i.Lease), so that the backend that made it can recognise its own grant:
// ok is false for a lease made by another LeaseInfo.
func (i *LeaseInfo) Token(lease Lease) (token uint64, ok bool) {
	if lease.info != i || i.reason != ReasonNone {
		return 0, false
	}
	return uint64(lease.retryAfter), true
}

// Leases holds the LeaseInfo of each outcome of a limiter whose leases
// release nothing, so that it makes leases without allocating. Make it once
// per limiter (capacity) with MakeLeases.
type Leases [len(reasonNames)]LeaseInfo

// MakeLeases returns the Leases of a limiter of capacity limit.
func MakeLeases(limit int64) Leases {
	var ls Leases
	for r := range ls {
		ls[r] = LeaseInfo{limit: limit, reason: Reason(r)}
	}
	return ls
}

// Lease makes the lease of d: granted, or refused for reason (ReasonLimit
// when reason is ReasonNone or unknown).
func (ls *Leases) Lease(d Decision, reason Reason) Lease {
	reason = outcome(d, reason)
	if int(reason) >= len(ls) {
		reason = ReasonLimit
	}
	return ls[reason].Lease(d, 0)
}

// outcome is the reason a lease of d carries: ReasonNone for a grant, and
// reason for a refusal, ReasonLimit when it is ReasonNone.
func outcome(d Decision, reason Reason) Reason {
	switch {
	case d.Granted:
		return ReasonNone
	case reason == ReasonNone:
		return ReasonLimit
	}
	return reason
}

// NewLease builds a lease from a decision of a limiter of capacity limit,
// for backends and user limiters. reason is ignored for granted decisions
// and defaults to ReasonLimit for refused ones. rel, when not nil, is called
// by Release with token. It allocates the lease's LeaseInfo; a backend that
// makes many leases keeps Leases or GrantInfo values instead.
func NewLease(d Decision, limit int64, reason Reason, rel Releaser, token uint64) Lease {
	return (&LeaseInfo{limit: limit, reason: outcome(d, reason), rel: rel}).Lease(d, token)
}

// Acquired reports whether the permits were granted.
func (l Lease) Acquired() bool { return l.info != nil && l.info.reason == ReasonNone }

// Reason says why the lease was refused; ReasonNone when it was granted.
func (l Lease) Reason() Reason {
	if l.info == nil {
		return ReasonNone
	}
	return l.info.reason
}

// RetryAfter is, for a refused lease, how long until the same request could
// be granted (weighted by the permits asked and, for a queue refusal, by the
// permits queued ahead). ok is false for granted leases and when the wait
// cannot be known (concurrency limits in memory).
func (l Lease) RetryAfter() (d time.Duration, ok bool) {
	if l.Acquired() || l.retryAfter < 0 {
		return 0, false
	}
	return l.retryAfter, true
}

// Remaining is the number of permits still available after this decision.
func (l Lease) Remaining() int64 { return l.remaining }

// Limit is the limiter's capacity: the most permits available at once.
func (l Lease) Limit() int64 {
	if l.info == nil {
		return 0
	}
	return l.info.limit
}

// ResetAfter is how long until all Limit permits are available again if
// nothing else happens (for HTTP headers such as RateLimit's t=).
func (l Lease) ResetAfter() time.Duration { return l.resetAfter }

// Release gives back the permits of a concurrency lease; for rate algorithms
// it does nothing, since their permits come back with time. It is idempotent,
// also on copies of the lease, and does nothing on a refused lease.
func (l Lease) Release() {
	if l.Acquired() && l.info.rel != nil {
		l.info.rel.Release(uint64(l.retryAfter))
	}
}

// String is a short description for logs.
func (l Lease) String() string {
	if l.Acquired() {
		return fmt.Sprintf("granted (remaining %d of %d)", l.remaining, l.Limit())
	}
	if d, ok := l.RetryAfter(); ok {
		return fmt.Sprintf("refused: %v, retry after %v", l.Reason(), d)
	}
	return fmt.Sprintf("refused: %v", l.Reason())
}
