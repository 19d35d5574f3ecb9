// Package memory runs limitkit's algorithms in the process: state in memory,
// one mutex per limiter, and a Wait queue woken by one timer per limiter.
//
// memory.New(cfg) accepts the Config of any algorithm package (tokenbucket,
// fixedwindow, slidingwindow, slidinglog, concurrency, quota). The redis
// package's redis.New(client, key, cfg) takes the same configs and makes
// the same decisions, with the state shared by every process. NewFactory
// makes many small limiters of one config, for example one per partition of
// a partitioned limiter. NewKeyed keeps a limit per key (per user, per
// client IP) with each key's state inline in its index: a ratelimit.Keyed.
//
// Time is read from the monotonic clock against a fixed base instant (cheaper
// than time.Now, and immune to wall-clock jumps), so instants are nanoseconds
// since the Unix epoch as of the process start. WithClock injects a fake clock.
package memory

import (
	"context"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/engine"
)

// Limiter is an in-memory limiter. Besides ratelimit.Limiter it has the
// capabilities package control reaches (Refund, Settle, Reset,
// Reconfigure, Stats), reports how long it has been idle, tells the Waits that queue to
// their ctx's waittrace hooks, and can be closed.
type Limiter interface {
	ratelimit.Limiter
	// Refund takes back a grant of permits this limiter made, as
	// control.Refund says: its permits, and its count in Stats'
	// Granted; for a concurrency lease it is Release, which counts the
	// grant out of Granted too the first time (a lease of another limiter
	// is released, and counts nothing here). ctx must not be nil
	// (ratelimit.ErrNilContext) and is not read otherwise: nothing here
	// waits, and a done ctx still gives the permits back.
	Refund(ctx context.Context, lease ratelimit.Lease, permits int) error
	// Settle settles lease, a reservation of a grant of this limiter
	// (control.Reserve), at the actual cost, as control.Settle says: what
	// was reserved beyond it comes back as Refund gives it back, what
	// exceeds it is charged at once (a token bucket in debt, a window over
	// its limit). Stats' Granted is unchanged. A concurrency limiter has
	// nothing to settle (errors.ErrUnsupported). The limiters of a Factory
	// take each other's grants as their own, as for Refund. ctx must not be
	// nil and is not read otherwise.
	Settle(ctx context.Context, lease ratelimit.Lease, actual int) error
	// CheckPermits reports the error Acquire and Wait return for permits
	// whatever the state (a Chain asks it first): a negative permits, or
	// more than the capacity of the configuration in force.
	CheckPermits(permits int) error
	// Stats returns a snapshot of the limiter's counters.
	Stats() ratelimit.Stats
	// Backend returns "memory": the backend's name, as metrics label it.
	Backend() string
	// IdleFor reports how long the limiter has been back in its initial state
	// (full bucket, empty window, nothing held, nobody waiting); ok is false
	// when it is not idle now. Replacing an idle limiter by a new one changes
	// no decision.
	IdleFor() (d time.Duration, ok bool)
	// Close refuses every queued waiter (ReasonClosed); later calls return
	// ratelimit.ErrClosed and releases do nothing. It is safe to call twice.
	Close() error
	// Reconfigure applies a config of the same algorithm from the next
	// decision, as control.Reconfigure says, carrying the state over:
	// the permits a rate algorithm has in use stay in use, taken at the
	// instant of the change (a token bucket keeps its tokens, clamped to
	// the new burst, and its debt; a window's count is held against the new
	// limit until the window in which the change falls ends); a concurrency
	// limit's holders keep their permits. The limiters of a Factory share
	// their configuration: reconfiguring one reconfigures all. On a closed
	// limiter it returns ratelimit.ErrClosed and changes nothing, for the
	// limiters that share its configuration too.
	Reconfigure(cfg ratelimit.Config) error
	// Reset puts the limiter back in its initial state, as control.Reset
	// says.
	Reset(ctx context.Context) error
}

// Option configures New, NewFactory and NewKeyed.
type Option func(*options)

type options struct {
	clock   ratelimit.Clock
	idle    time.Duration // NewKeyed's
	maxKeys int           // NewKeyed's
}

// WithClock makes the limiter read time and set timers from c instead of the
// system's monotonic clock. For tests: see ratelimittest.Clock.
func WithClock(c ratelimit.Clock) Option { return func(o *options) { o.clock = c } }

// New returns an in-memory limiter for cfg, which must be one of the
// algorithm packages' Config values (or pointers to them).
func New(cfg ratelimit.Config, opts ...Option) (Limiter, error) {
	b, err := newBuilder(cfg, opts)
	if err != nil {
		return nil, err
	}
	return b.First(), nil
}

// Factory makes in-memory limiters that share one validated config. Each
// limiter it makes is one allocation of its own state only (96 bytes for a
// token bucket, 80 for a fixed window, where New allocates the shared
// part too), which suits partitioned limiters with many keys. A Factory is
// safe for concurrent use.
type Factory struct{ b engine.Builder }

// NewFactory validates cfg (see New) and returns a factory of limiters for it.
func NewFactory(cfg ratelimit.Config, opts ...Option) (*Factory, error) {
	b, err := newBuilder(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &Factory{b: b}, nil
}

// New returns a new limiter, in its initial state.
func (f *Factory) New() Limiter { return f.b.Next() }

// Reconfigure applies cfg, a config of the factory's algorithm, to every
// limiter the factory made and makes (see Limiter.Reconfigure).
func (f *Factory) Reconfigure(cfg ratelimit.Config) error { return f.b.First().Reconfigure(cfg) }

// ForKey is New with the signature of partitioned.Config's New: every key
// gets its own limiter of the factory's config.
func (f *Factory) ForKey(string) (ratelimit.Limiter, error) { return f.b.Next(), nil }

// newBuilder validates cfg and makes the builder of its limiters.
func newBuilder(cfg ratelimit.Config, opts []Option) (engine.Builder, error) {
	d, err := algo.Of("memory", cfg)
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return d.Memory(o.clock)
}
