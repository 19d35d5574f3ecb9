package redis

import (
	"errors"
	"time"

	"github.com/limitkit/ratelimit"
)

// MaxKeyLen bounds the key given to New, in bytes.
const MaxKeyLen = 1024

// Errors of this package; test them with errors.Is.
var (
	// ErrInvalidKey: the key is empty, longer than MaxKeyLen, or starts
	// with "}" (the hash tag prefix{key} would be empty, and a Cluster
	// would hash a limiter's keys to different slots). Nothing is sent.
	ErrInvalidKey = errors.New("redis: invalid key")
	// ErrUnavailable wraps a Redis failure under the default FailError
	// policy; the error wraps the failure too (context.DeadlineExceeded when
	// the limiter's timeout passed, a network error, ...): errors.Is and
	// errors.As find both.
	ErrUnavailable = errors.New("redis: backend unavailable")
)

// Option configures New.
type Option func(*options)

type options struct {
	noCache    bool
	noCoalesce bool
	prefix     string
	clock      ratelimit.Clock // the local clock; nil: the system's
	pin        bool            // the scripts' time is clock's (WithClock), not Redis's TIME
	policy     FailurePolicy
	fallback   ratelimit.Limiter
	timeout    time.Duration
	leaseTTL   time.Duration
	onFailure  func(error)
}

// WithPrefix sets the key prefix; the default is "ratelimit:". It must not
// hold "{" or "}": a limiter's keys share the hash tag of its key, so that
// they share a Cluster slot.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithFailurePolicy sets what to answer when Redis fails; FailError by default.
func WithFailurePolicy(p FailurePolicy) Option { return func(o *options) { o.policy = p } }

// WithFallback answers from a local limiter (memory.New, say) while Redis fails.
func WithFallback(l ratelimit.Limiter) Option { return func(o *options) { o.fallback = l } }

// WithOnFailure calls f with the error of each call to Redis that failed
// (a network error, the limiter's timeout, an error reply) in Acquire,
// Wait, Refund and a concurrency lease's Release (including the calls a
// caller does not see: a cancelled reservation's refund), before the
// failure policy answers the caller; a call whose caller's ctx ended is
// not a failure, nor are the background renewals of concurrency leases.
// It is called whatever the policy, so that what a caller cannot see is
// counted too: a FailOpen grant, and an answer of the fallback
// (WithFallback). f runs on the caller's goroutine; it must be quick and
// must not call the limiter. The otel module's Recorder.CountRedisFailures
// is one.
func WithOnFailure(f func(error)) Option { return func(o *options) { o.onFailure = f } }

// DefaultTimeout is the bound on each call to Redis when WithTimeout is not
// given.
const DefaultTimeout = time.Second

// WithTimeout bounds each call to Redis (Acquire, Wait's round trips,
// Refund, Stats), DefaultTimeout (1s) by default: past it the call returns,
// within a few milliseconds, with the failure policy's answer (FailError:
// an error wrapping both ErrUnavailable and context.DeadlineExceeded). The
// bound holds whatever the go-redis client's options. With
// Options.ContextTimeoutEnabled (as the README's client sets), go-redis
// itself stops reading at the deadline, and a lone call runs on its
// caller's goroutine (calls that queue behind others leave in a batch from
// a sending goroutine either way). Without it (or with socket deadlines
// disabled, a ReadTimeout or WriteTimeout of -2, or with a UniversalClient
// other than go-redis's Client, ClusterClient and Ring) go-redis ignores a
// context's deadline while reading a reply, so each call runs in a
// goroutine the caller stops waiting for at the deadline (a goroutine
// switch per call: about 1.5x the latency of a lone caller,
// BenchmarkRedisLone in the bench module); a
// script call so left behind finishes on its own when the server answers
// or the client's own timeouts (ReadTimeout, 3s by default) fire. Either
// way a decision the server makes after the caller left (a permit taken)
// stands, as with a cancelled ctx. A caller's ctx that ends sooner ends the
// call sooner, with the ctx's error; with ContextTimeoutEnabled a
// cancellation (rather than a deadline) is seen before the call leaves and
// once its answer arrives, the deadline bounding the wait in between. A d
// of zero or less removes the bound: calls then wait for their ctx or the
// client's own timeouts.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithLeaseTTL sets how long a concurrency lease survives its holder's
// silence (a crashed process): leases are renewed every TTL/3 (on the
// limiter's clock) while held, by one goroutine per client that renews the
// leases of all its limiters in pipelined round trips. The default is 30s.
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// WithoutRefusalCache sends every request to Redis. By default a refusal of
// p permits with RetryAfter r is remembered, and requests for the same p
// permits on this limiter are refused locally until r has passed, or one
// second, whichever comes first, with the remaining RetryAfter: grants
// only use permits up, so a flood on an over-limit key costs Redis one
// call per RetryAfter (at most one per second) instead of one per
// request. A grant, a refund, a cancelled reservation, a Reset or a
// Reconfigure through this limiter forgets the cached refusal. What other
// processes do meanwhile that gives permits back (a Reset, as an admin's
// reset of a key; a refund; a cancelled token-bucket reservation; a
// Reconfigure that raises the limit) is seen within that second: until
// then the cache refuses what Redis would grant, never the reverse. A
// cached refusal reports Remaining as of the refusal (grants elsewhere may
// have lowered it since). Concurrency refusals (no RetryAfter) and
// token-bucket Wait are never cached.
func WithoutRefusalCache() Option { return func(o *options) { o.noCache = true } }

// WithoutCoalescing makes every decision its own script call. By default
// the concurrent decisions of every limiter on one client are sent in
// batches: the decisions of one algorithm in one script call that makes
// them one after another at one instant (one TIME; one GET and one SET per
// key of a string state), the script calls of several algorithms in one
// pipelined round trip. On a single node one batch may carry any keys; on a
// Cluster a batch carries the keys of one hash slot (so one slot's batch
// never waits for another's), and on a Ring or another client the keys of
// one hash tag (a single-node client's batches may carry several keys in
// one script call, which a proxy that shards one endpoint, such as
// twemproxy, refuses: use WithoutCoalescing behind one). Decisions are the
// same as the same calls made one by one, and a decision that fails (a key
// of another type, say) fails alone.
// There is no linger time: a lone caller's call leaves at once, alone, so
// it costs nothing at low concurrency; callers that arrive while batches
// are in flight leave together in the next one. Measured at 64 goroutines
// (see bench/README.md), batches make a token bucket about 3x faster than
// go-redis/redis_rate on one key, and 2x over 10,000 keys.
func WithoutCoalescing() Option { return func(o *options) { o.noCoalesce = true } }

// WithClock pins the time sent to the scripts to c.Now(), and makes Wait
// sleep on c. For tests only: in production the time is Redis's.
func WithClock(c ratelimit.Clock) Option {
	return func(o *options) { o.clock, o.pin = c, c != nil }
}

// WithLocalClock makes c the limiter's local clock, as the system clock is
// by default: Wait sleeps on it, IdleFor reads it, and so do the
// arguments an algorithm computes from the caller's time (a calendar
// quota's period boundaries); the scripts still decide at Redis's TIME.
// For tests of processes whose clocks disagree with Redis's.
func WithLocalClock(c ratelimit.Clock) Option {
	return func(o *options) { o.clock, o.pin = c, false }
}
