package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/engine"
)

// Keyed is a limit per key (per user, per client IP, per host) of one
// configuration, in memory: a ratelimit.Keyed, for the middlewares and
// anything that takes one. Each key decides exactly as a limiter of its
// own, memory.New(cfg), would (the same leases, the same Wait queue and
// its waittrace hooks), and a key not seen before starts in the initial
// state. It is safe for concurrent use; Close it when done.
//
// Each key's state is kept inline in the index, a table whose slot holds
// the key (its bytes are the caller's string's, not copied, as a Go map's
// key) and the state: 48 bytes for a token bucket, about 100 per key in
// all at 1,000,000 keys. A decision on a known key allocates nothing. A
// key whose Wait queues, and every key of a concurrency limit, is held by
// a limiter of its own while that lasts.
//
// One sweeper evicts the keys that have been idle (back in their initial
// state, nobody waiting, no call in flight) for the idle timeout
// (WithIdleTimeout), so memory is bounded by the active keys and eviction
// never changes a decision. At most WithMaxKeys keys are kept: a new key
// then takes the place of an idle one, or is refused (ReasonNoPartition,
// RetryAfter unknown); busy keys are never evicted to make room.
type Keyed struct{ k engine.Keyed }

// KeyedStats counts a Keyed's keys.
type KeyedStats struct {
	Keys    int64 // keys held now; never more than WithMaxKeys
	Created int64 // keys added since NewKeyed
	Evicted int64 // keys evicted (idle)
	Refused int64 // requests refused because WithMaxKeys keys were busy
}

// WithIdleTimeout sets how long a key must have been idle to be evicted
// by NewKeyed's sweeper, which runs every quarter of it; zero means one
// minute. New and NewFactory ignore it.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idle = d } }

// WithMaxKeys bounds the keys NewKeyed keeps at once; zero means 1<<20.
// New and NewFactory ignore it.
func WithMaxKeys(n int) Option { return func(o *options) { o.maxKeys = n } }

// NewKeyed validates cfg (see New) and its options, and returns a limit
// per key of cfg; an invalid value is an error wrapping
// ratelimit.ErrInvalidConfig that names it.
func NewKeyed(cfg ratelimit.Config, opts ...Option) (*Keyed, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.idle < 0 {
		return nil, fmt.Errorf("%w: memory: WithIdleTimeout must not be negative, got %v", ratelimit.ErrInvalidConfig, o.idle)
	}
	if o.maxKeys < 0 {
		return nil, fmt.Errorf("%w: memory: WithMaxKeys must not be negative, got %d", ratelimit.ErrInvalidConfig, o.maxKeys)
	}
	if o.idle == 0 {
		o.idle = time.Minute
	}
	if o.maxKeys == 0 {
		o.maxKeys = 1 << 20
	}
	b, err := newBuilder(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &Keyed{b.Keyed(o.idle, int64(o.maxKeys))}, nil
}

// errNotMade is the error of a Keyed not made by NewKeyed.
var errNotMade = fmt.Errorf("%w: memory: a Keyed must be made by NewKeyed", ratelimit.ErrInvalidConfig)

// Acquire takes permits for key now, or refuses, as key's own limiter
// would (see Limiter). Negative permits, more than the capacity, a nil or
// done ctx are errors that change nothing (no key is added); after Close
// it returns ratelimit.ErrClosed. A status check (permits == 0) of a key
// without an entry adds one, as any call does (and may so take an idle
// key's place): while WithMaxKeys busy keys leave no room, it is refused
// (ReasonNoPartition), as a request on that key would be.
func (k *Keyed) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	if k == nil || k.k == nil {
		return ratelimit.Lease{}, errNotMade
	}
	return k.k.Acquire(ctx, key, permits)
}

// Wait takes permits for key, queueing in key's queue as key's own
// limiter would (see Limiter, and ratelimit.Queue), until ctx is done; it
// tells its queueing to ctx's waittrace hooks. Errors are Acquire's.
func (k *Keyed) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	if k == nil || k.k == nil {
		return ratelimit.Lease{}, errNotMade
	}
	return k.k.Wait(ctx, key, permits)
}

// For returns the limiter of key, for Chain or for code written against
// ratelimit.Limiter. Through package control it refunds (a grant of this
// key: the leases of every key share the configuration, as a Factory's
// limiters do, so a grant refunded to another key is taken as that key's),
// settles (control.Settle; a charge of a key without an entry while
// WithMaxKeys keys are busy, none idle, is an error that changes nothing,
// and the lease can be settled later) and resets; it reports IdleFor (a
// key without an entry is idle), so it can be a partition of package
// partitioned. It has no Stats, Reconfigure or Close: those are the
// Keyed's.
func (k *Keyed) For(key string) ratelimit.Limiter {
	if k == nil || k.k == nil {
		return nil
	}
	return k.k.For(key)
}

// Reconfigure validates cfg, a config of the same algorithm, once, and
// applies it to every key from its next decision, carrying each key's
// state over by its algorithm's rule, at the instant of the change (see
// Limiter.Reconfigure; queued waiters are examined again at once). A key
// not held then (never seen, or evicted idle) starts in the new
// configuration's initial state, as a new key does. An invalid cfg, or one
// of another algorithm, is an error wrapping ratelimit.ErrInvalidConfig
// that changes nothing; after Close it returns ratelimit.ErrClosed.
// Applying the config in force again changes nothing.
func (k *Keyed) Reconfigure(cfg ratelimit.Config) error {
	if k == nil || k.k == nil {
		return errNotMade
	}
	return k.k.Reconfigure(cfg)
}

// Config returns the configuration every key decides by now (the last
// one Reconfigure applied), as a value, not a pointer: what
// httplimit.Configured asks, so that a middleware's RateLimit-Policy
// follows a Reconfigure. It is nil for a nil or zero Keyed.
func (k *Keyed) Config() ratelimit.Config {
	if k == nil || k.k == nil {
		return nil
	}
	return k.k.Config()
}

// Stats returns the key counters; a nil or zero Keyed has none.
func (k *Keyed) Stats() KeyedStats {
	if k == nil || k.k == nil {
		return KeyedStats{}
	}
	s := k.k.Stats()
	return KeyedStats{Keys: s.Keys, Created: s.Created, Evicted: s.Evicted, Refused: s.Refused}
}

// Close stops the sweeper and refuses every queued waiter
// (ReasonClosed); later calls return ratelimit.ErrClosed, and releases do
// nothing. It is safe to call twice, and on a nil Keyed.
func (k *Keyed) Close() error {
	if k == nil || k.k == nil {
		return nil
	}
	return k.k.Close()
}

var _ ratelimit.Keyed = (*Keyed)(nil)
