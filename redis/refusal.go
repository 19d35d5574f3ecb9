package redis

import (
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
)

// refusal is a remembered refusal: requests of exactly permits are refused
// until the local instant until (UnixNano), with the RetryAfter left until
// retryAt, the refusal's own; until is at most maxRefusalAge after the
// refusal. (Larger requests would be refused too, but their RetryAfter is
// longer: they go to Redis.)
type refusal struct {
	permits, remaining      int64
	until, retryAt, resetAt int64
	params                  *params // the configuration it was decided under: a Reconfigure voids it
}

// maxRefusalAge bounds how long a refusal is remembered, whatever its
// RetryAfter, so that what other processes change meanwhile (a Reset, a
// refund, a Reconfigure) is seen within it: a flood on an over-limit key
// then costs Redis one call per second at most.
const maxRefusalAge = time.Second

// cached answers from the remembered refusal, when it applies.
func (l *Limiter) cached(p int64, at time.Time) (ratelimit.Lease, bool) {
	r := l.refusal.Load()
	if r == nil || max(p, 1) != r.permits || r.params != l.params() {
		return ratelimit.Lease{}, false
	}
	now := at.UnixNano()
	if now >= r.until {
		return ratelimit.Lease{}, false
	}
	d := backend.Decision{Remaining: r.remaining, RetryAfter: time.Duration(r.retryAt - now), ResetAfter: time.Duration(max(r.resetAt-now, 0))}
	return (&l.params().infos).Lease(d, ratelimit.ReasonLimit, 0), true
}

// remember caches a refusal of p permits decided at the local instant at; a
// grant forgets the cached refusal, whose Remaining it changed.
// pm is the configuration loaded before the call: the one the script ran
// with, or an older one (then the refusal is never used).
func (l *Limiter) remember(at time.Time, p int64, r reply, pm *params) {
	if r.granted && l.refusal.Load() != nil {
		l.refusal.Store(nil)
	}
	if l.o.noCache || r.granted || r.retryAfter <= 0 {
		return
	}
	t := at.UnixNano()
	l.refusal.Store(&refusal{permits: max(p, 1), remaining: r.remaining, until: t + int64(min(r.retryAfter, maxRefusalAge)),
		retryAt: t + int64(r.retryAfter), resetAt: t + int64(r.resetAfter), params: pm})
}
