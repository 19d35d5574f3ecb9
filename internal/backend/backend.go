// Package backend is what the module's limiters (memory, redis,
// partitioned) share to make their leases from their models' decisions,
// and the Decision of the models they run.
package backend

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
)

// Decision is one answer of an algorithm's model (its Step), and the
// figures of the lease a backend makes of it. Durations are relative to
// the instant of the decision.
//
// It is kept to four word-sized fields, so that Go passes it in registers
// (see ratelimit.Lease); the limiter's capacity, which a lease also
// carries, is the backend's.
type Decision struct {
	Remaining int64 // permits still available after this decision
	// RetryAfter, for a refusal, is the shortest wait after which the same
	// request would be granted if nothing else happened; negative when
	// unknown (a concurrency limit, whose permits come back on Release).
	RetryAfter time.Duration
	// ResetAfter is how long until all permits are available again if
	// nothing else happens.
	ResetAfter time.Duration
	Granted    bool
}

// Unlimited is the capacity of a limiter without a limit (a token bucket of
// rate.Inf): no request is too large. Its leases report a Limit of -1.
const Unlimited = math.MaxInt64

// reasons is the number of ratelimit's Reasons, ReasonNone included.
const reasons = int(ratelimit.ReasonNoPartition) + 1

// Outcomes holds the Outcome of each outcome of a limiter whose grants hold
// nothing to release: [0] for grants, [r] for refusals for reason r. Make
// it once per limiter with MakeOutcomes.
type Outcomes [reasons]ratelimit.Outcome

// MakeOutcomes returns the Outcomes of a limiter of capacity limit
// (Unlimited, or -1: no limit, whose leases report -1).
func MakeOutcomes(limit int64) Outcomes {
	if limit == Unlimited {
		limit = -1
	}
	var os Outcomes
	for r := range os {
		os[r] = ratelimit.Outcome{Limit: limit, Reason: ratelimit.Reason(r)}
	}
	return os
}

// Lease makes the lease of d: a grant carrying token, or a refusal for
// reason (ReasonLimit when ReasonNone or unknown).
func (os *Outcomes) Lease(d Decision, reason ratelimit.Reason, token uint64) ratelimit.Lease {
	if d.Granted {
		return os[0].Lease(d.Remaining, 0, d.ResetAfter, token)
	}
	if reason == ratelimit.ReasonNone || int(reason) >= len(os) {
		reason = ratelimit.ReasonLimit
	}
	return os[reason].Lease(d.Remaining, d.RetryAfter, d.ResetAfter, 0)
}

// SetGrows makes g say the GrowsAfter of the grants of os.
func (os *Outcomes) SetGrows(g Grows) { os[0].Grows = g }

// Grows is what says a grant's GrowsAfter (ratelimit.Outcome's Grows).
type Grows interface {
	GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool)
}

// GrowsFunc is a function that is a Grows.
type GrowsFunc func(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool)

// GrowsAfter calls f.
func (f GrowsFunc) GrowsAfter(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool) {
	return f(remaining, resetAfter, now)
}

// Grant makes a grant of o (an Outcome of grants) with d's figures.
func Grant(o *ratelimit.Outcome, d Decision, token uint64) ratelimit.Lease {
	return o.Lease(d.Remaining, 0, d.ResetAfter, token)
}

// Refusal makes a lease of one refusal for reason with d's figures and an
// Outcome of its own (one allocation), for limiters that refuse rarely.
func Refusal(d Decision, limit int64, reason ratelimit.Reason) ratelimit.Lease {
	o := &ratelimit.Outcome{Limit: limit, Reason: reason}
	return o.Lease(d.Remaining, d.RetryAfter, d.ResetAfter, 0)
}

// NoCost is the error a limiter's Settle returns for a grant held until
// Release (a concurrency limit's): there is no cost to settle. It wraps
// errors.ErrUnsupported; a Chain and control.Refund tell it apart from a
// limiter that cannot settle at all by its NoCost method (see IsNoCost;
// the root package, which imports nothing internal, asks for the method).
type NoCost struct {
	Backend string           // "memory", "redis"
	Config  ratelimit.Config // the limit's
}

func (e *NoCost) Error() string {
	return fmt.Sprintf("%s: a %T limit has no cost to settle (its permits come back on Release): %v", e.Backend, e.Config, errors.ErrUnsupported)
}

func (e *NoCost) Unwrap() error { return errors.ErrUnsupported }

// NoCost marks the error (see IsNoCost).
func (*NoCost) NoCost() {}

// IsNoCost reports whether err says that a grant has no cost to settle.
func IsNoCost(err error) bool {
	var nc interface{ NoCost() }
	return errors.As(err, &nc)
}
