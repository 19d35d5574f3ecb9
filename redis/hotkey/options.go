package hotkey

import (
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/redis"
)

// Option configures New.
type Option func(*options)

type options struct {
	prefix    string
	expiry    time.Duration
	share     float64
	timeout   time.Duration
	policy    redis.FailurePolicy
	fallback  ratelimit.Limiter
	onFailure func(error)
	clock     ratelimit.Clock
}

// DefaultExpiry is a lease's expiry when WithExpiry is not given.
const DefaultExpiry = 100 * time.Millisecond

// DefaultShare is the fraction of the limit that the live leases of all
// processes may hold together when WithShare is not given.
const DefaultShare = 0.25

// WithExpiry sets how long a lease lives, from the instant its call was
// sent: 1ms to 1 minute, DefaultExpiry (100ms) by default. It bounds what
// a crashed process strands (its last lease, until it expires) and how long
// a refusal is remembered. A sliding log logs a lease's permits at its
// expiry, so its expiry costs it admissions (see the package doc): keep it
// a small fraction of the Window.
func WithExpiry(d time.Duration) Option { return func(o *options) { o.expiry = d } }

// WithShare sets the fraction of the limit (a token bucket's Burst, a
// window's Limit) that the live leases of all processes may hold together,
// in (0, 1]: DefaultShare (0.25) by default. A take that would hold more is
// cut down to what is left (the caller's own permits are always decided,
// as the exact limiter decides them).
func WithShare(f float64) Option { return func(o *options) { o.share = f } }

// WithPrefix sets the key prefix, "ratelimit:" by default; it must not hold
// "{" or "}" (see package redis).
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithTimeout bounds each call to Redis, redis.DefaultTimeout (1s) by
// default; zero or less removes the bound. Past it the call is answered by
// the failure policy, whatever the go-redis client's options.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithFailurePolicy sets what a request answers when it needs Redis (its
// process holds no lease that can serve it) and Redis fails:
// redis.FailError by default (an error wrapping redis.ErrUnavailable),
// redis.FailOpen or redis.FailClosed, as package redis says.
func WithFailurePolicy(p redis.FailurePolicy) Option { return func(o *options) { o.policy = p } }

// WithFallback answers from a local limiter while Redis fails, as package
// redis's WithFallback.
func WithFallback(l ratelimit.Limiter) Option { return func(o *options) { o.fallback = l } }

// WithOnFailure calls f with the error of each failed call to Redis (a
// refill, a lease given back) before the failure policy answers; f must be
// quick and must not call the limiter.
func WithOnFailure(f func(error)) Option { return func(o *options) { o.onFailure = f } }

// WithClock makes the limiter read c for its local instants and deadlines,
// sleep on c, and pin the scripts' time to c.Now(). For tests only: in
// production the scripts' time is Redis's.
func WithClock(c ratelimit.Clock) Option { return func(o *options) { o.clock = c } }
