// Package leases is the layout of ratelimit.Lease and what the module's
// limiters make leases with. ratelimit.Lease is defined on Lease (a
// conversion costs nothing), so a backend makes a lease here and converts
// it: ratelimit.Lease(infos.Make(...)).
//
// A lease is four words: what the leases of one outcome of a limiter share
// (its capacity, its reason, its Releaser) sits behind one pointer, an
// Info, which a backend makes once per limiter (Infos) or per held
// resource (GrantInfo), so that making a lease allocates nothing.
package leases

import (
	"math"
	"time"
)

// Reasons is the number of refusal reasons ratelimit declares (its Reason
// constants, 0 to Reasons-1). Reason 0 is no refusal: a grant.
const Reasons = 8

// Limit is ratelimit.ReasonLimit, the reason of a refusal that names none.
const Limit = 1

// Releaser gives back what a granted lease holds. Release(token) must be
// idempotent: only its first call for a token has an effect.
type Releaser interface {
	Release(token uint64)
}

// Info is the part of a lease that every lease of one outcome of a limiter
// shares: its capacity, its reason (0: granted) and what Release calls. It
// does not change once made.
type Info struct {
	limit  int64
	reason uint8
	rel    Releaser
	grows  Grows // a grant's GrowsAfter; nil: unknown
}

// Grows is the time until the available quota of a grant that left
// remaining permits, all of them back after resetAfter, next grows, for a
// grant made at now (its limiter's clock): the t of the RateLimit header
// field. ok is false when it is not known. A backend gives its grants one
// from its algorithm (internal/algo), for the configuration in force, so
// that a reconfiguration is followed. An interface, so that a wrapper
// whose grants are records of their own (a Chain's) is one without an
// allocation more.
type Grows interface {
	GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (d time.Duration, ok bool)
}

// GrowsFunc is a function that is a Grows.
type GrowsFunc func(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool)

// GrowsAfter calls f.
func (f GrowsFunc) GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool) {
	return f(remaining, resetAfter, now)
}

// NextToken is the time until a bucket that refills a token every
// perToken nanoseconds, all full after resetAfter, next gains a whole
// token: resetAfter modulo perToken (perToken for a full bucket), rounded
// up to the nanosecond. What tokenbucket and ratelimit.FromRate tell as a
// grant's GrowsAfter.
func NextToken(resetAfter time.Duration, perToken float64) time.Duration {
	ns := perToken
	if resetAfter > 0 {
		if r := math.Mod(float64(resetAfter), perToken); r > 0 {
			ns = r
		}
	}
	return time.Duration(math.Ceil(ns))
}

// WithGrows is i whose grants' GrowsAfter g says.
func WithGrows(i Info, g Grows) Info {
	i.grows = g
	return i
}

// SetGrows makes g say the GrowsAfter of the grants of is.
func (is *Infos) SetGrows(g Grows) { is[0].grows = g }

// GrowsAfter is a grant's Grows, at now; ok is false for a refusal, the
// zero Lease, and a grant whose limiter does not know it.
func (l Lease) GrowsAfter(now time.Time) (time.Duration, bool) {
	if !l.Acquired() || l.info.grows == nil {
		return 0, false
	}
	return l.info.grows.GrowsAfter(l.remaining, l.resetAfter, now)
}

// Grows is the Grows of a grant's Info (nil for other leases).
func (l Lease) Grows() Grows {
	if !l.Acquired() {
		return nil
	}
	return l.info.grows
}

// GrantInfo returns the Info of the grants of a limiter of capacity limit
// whose Release calls rel.Release with the lease's token.
func GrantInfo(limit int64, rel Releaser) Info { return Info{limit: limit, rel: rel} }

// Limit is the capacity of the leases of i.
func (i *Info) Limit() int64 { return i.limit }

// Grant makes a grant of i, which must be a GrantInfo or Infos' grant, with
// its figures; Release passes token to i's Releaser, and Token returns it.
func (i *Info) Grant(remaining int64, resetAfter time.Duration, token uint64) Lease {
	return Lease{remaining: remaining, x: int64(token), resetAfter: resetAfter, info: i}
}

// Infos holds the Info of each outcome of a limiter whose grants hold
// nothing to release: Infos[0] for grants, Infos[r] for refusals for
// reason r. Make it once per limiter with MakeInfos.
type Infos [Reasons]Info

// Unlimited is the capacity of a limiter without a limit (a token bucket of
// rate.Inf): no request is too large. Its leases report a Limit of -1.
const Unlimited = math.MaxInt64

// MakeInfos returns the Infos of a limiter of capacity limit (Unlimited, or
// -1: no limit, whose leases report -1).
func MakeInfos(limit int64) Infos {
	if limit == Unlimited {
		limit = -1
	}
	var is Infos
	for r := range is {
		is[r] = Info{limit: limit, reason: uint8(r)}
	}
	return is
}

// Make makes a lease: a grant (token is what Token returns) when granted,
// else a refusal for reason (Limit when reason is 0 or unknown) whose
// RetryAfter is retryAfter, unknown when negative.
func (is *Infos) Make(granted bool, reason uint8, remaining int64, retryAfter, resetAfter time.Duration, token uint64) Lease {
	if granted {
		return is[0].Grant(remaining, resetAfter, token)
	}
	if reason == 0 || int(reason) >= len(is) {
		reason = Limit
	}
	return Lease{remaining: remaining, x: int64(retryAfter), resetAfter: resetAfter, info: &is[reason]}
}

// New makes a lease with an Info of its own (one allocation), for limiters
// that make few leases.
func New(granted bool, reason uint8, limit, remaining int64, retryAfter, resetAfter time.Duration, rel Releaser, token uint64) Lease {
	if granted {
		reason = 0
	} else if reason == 0 || reason >= Reasons {
		reason = Limit
	}
	i := &Info{limit: limit, reason: reason, rel: rel}
	if granted {
		return i.Grant(remaining, resetAfter, token)
	}
	return Lease{remaining: remaining, x: int64(retryAfter), resetAfter: resetAfter, info: i}
}

// Lease is ratelimit.Lease's layout; its doc comments are there. The zero
// Lease is no decision: not granted, reason 0, no figures.
//
// x is a grant's token and a refusal's RetryAfter (negative: unknown): a
// fifth word, which would keep both apart, makes a lease that a call
// returns several times slower to make and return (BenchmarkLeaseWords in
// this package: about 3 ns against 15 to 22 ns), since Go returns up to
// four words in registers and a larger struct through memory.
type Lease struct {
	remaining  int64
	x          int64
	resetAfter time.Duration
	info       *Info
}

// Acquired reports a grant.
func (l Lease) Acquired() bool { return l.info != nil && l.info.reason == 0 }

// Reason is 0 for a grant and for the zero Lease.
func (l Lease) Reason() uint8 {
	if l.info == nil {
		return 0
	}
	return l.info.reason
}

// RetryAfter is a refusal's, when known.
func (l Lease) RetryAfter() (time.Duration, bool) {
	if l.info == nil || l.info.reason == 0 || l.x < 0 {
		return 0, false
	}
	return time.Duration(l.x), true
}

func (l Lease) Remaining() int64 { return l.remaining }

// Limit is 0 for the zero Lease.
func (l Lease) Limit() int64 {
	if l.info == nil {
		return 0
	}
	return l.info.limit
}

func (l Lease) ResetAfter() time.Duration { return l.resetAfter }

// Release calls a grant's Releaser with its token.
func (l Lease) Release() {
	if l.Acquired() && l.info.rel != nil {
		l.info.rel.Release(uint64(l.x))
	}
}

// Token returns the token of l when l is a grant made with i, so that the
// limiter that made it can recognise its own grant: ok is false for any
// other lease.
func (l Lease) Token(i *Info) (token uint64, ok bool) {
	if l.info != i || !l.Acquired() {
		return 0, false
	}
	return uint64(l.x), true
}

// Releaser is the Releaser of a grant (nil for other leases).
func (l Lease) Releaser() Releaser {
	if !l.Acquired() {
		return nil
	}
	return l.info.rel
}

// From reports whether l was made with i.
func (l Lease) From(i *Info) bool { return l.info == i }

// Info is the Info l was made with; nil for the zero Lease.
func (l Lease) Info() *Info { return l.info }
