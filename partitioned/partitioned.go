// Package partitioned keeps one limiter per key: per user, per client IP,
// per tenant, per upstream host. A Limiter is a ratelimit.Keyed, what the
// middlewares and the policy registry take; Global and Func make the other
// Keyed limiters (one limiter for every key, a function of the key).
// Partitions are created on first use and
// evicted when they have been idle (back in their initial state, nobody
// waiting, no call in flight) for IdleTimeout, so memory is bounded by the
// active keys and eviction never changes a decision: a partition
// created again decides exactly as the evicted one would have.
//
// MaxPartitions bounds the partitions alive at once. When it is reached, a
// new key takes the place of an idle partition, in any shard (a few
// partitions are looked at in each); when none is found idle, the new
// key is refused (ratelimit.ReasonNoPartition) or, when Overflow is
// set, shares that limiter. Active partitions are never evicted to make
// room.
//
// One sweeper (a timer re-armed after each sweep, never one per key) does
// the eviction. The partitions may be memory limiters or redis handles
// (the state then lives in Redis; the handle is all that is evicted).
//
// The partitioned limiter owns the limiters Config.New returns: it closes
// each (when it implements io.Closer) once the partition is evicted, when
// the limiter is discarded unused, and on Close. Close returns their Close
// errors; Config.OnCloseError receives the others.
//
// It relies on one capability of its partitions' limiters: they are
// Idlers, directly or through Unwrap (every limiter of this module is), so
// that a partition
// is evicted only when dropping its limiter changes no decision. A limiter
// that is not an Idler could never be evicted, and would hold its place
// (and, at MaxPartitions, refuse new keys) for ever: Config.New returning
// one is refused.
package partitioned

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// Config configures a partitioned limiter. Any string is a key, ""
// included, and reaches New unchanged; a backend may refuse some (redis
// refuses keys that are empty or longer than 1024 bytes), and a call then
// gets New's error, wrapped in ErrNoPartition. The key of a request (its
// client IP, its user) is the caller's to compute: httplimit.KeyFunc,
// grpclimit's Key.
type Config struct {
	// New creates the limiter of a partition; it sees the key, so it may
	// choose a config per key (or return NoLimit for exempt ones). It runs
	// outside every lock. Required. The partition owns the limiter: it is
	// closed (when it is an io.Closer) once the partition is evicted or the
	// Limiter closed, so return a new limiter per call, or wrap one shared
	// between keys with Shared. The limiter must be an Idler. An
	// error, a nil limiter or one that is not an Idler (which is closed)
	// creates no partition: the call gets an error wrapping ErrNoPartition
	// (and the factory's error, or ratelimit.ErrInvalidConfig).
	New func(key string) (ratelimit.Limiter, error)
	// IdleTimeout is how long a partition must have been idle to be evicted
	// by the sweeper. Zero means one minute.
	IdleTimeout time.Duration
	// MaxPartitions bounds the partitions alive at once; zero means 1<<20,
	// and it may be at most math.MaxInt32.
	MaxPartitions int
	// Overflow, if set, serves new keys while MaxPartitions are busy;
	// otherwise they are refused with ReasonNoPartition.
	Overflow ratelimit.Limiter
	// Clock drives the sweeper; nil means the system clock.
	Clock ratelimit.Clock
	// OnCloseError, if set, receives the error of closing the limiter of
	// key when the partition was evicted (by the sweeper, or to make room
	// for a new key) or when its limiter was discarded unused (a call that
	// lost the race to create key's partition, or found MaxPartitions
	// busy). It is called outside every lock of the partitioned limiter,
	// from the sweeper's goroutine or the caller's, possibly from several
	// at once. When nil these errors are dropped. Close returns its own.
	OnCloseError func(key string, err error)
}

// Stats counts partitions.
type Stats struct {
	Live    int64 // partitions alive now
	Created int64 // partitions created since New
	Evicted int64 // partitions evicted (idle)
	Refused int64 // requests refused because MaxPartitions were busy
}

// ErrNoPartition is wrapped by the error of a call whose partition Config.New
// could not create: it failed (its error is wrapped too, so that errors.Is
// finds the cause) or returned a nil limiter. The error names the key.
var ErrNoPartition = errors.New("partitioned: cannot create partition")

// The leases of refusals for want of a partition (capacity 0) and of NoLimit
// (capacity -1: none).
var noPartition, unlimited = backend.MakeOutcomes(0), backend.MakeOutcomes(-1)

const shards = 64

// Limiter is a partitioned limiter; safe for concurrent use.
type Limiter struct {
	cfg    Config
	seed   maphash.Seed
	shards [shards]shard
	store  store
	live   atomic.Int64
	stats  struct{ created, evicted, refused atomic.Int64 }

	mu     sync.Mutex  // guards stop and closed
	stop   func() bool // the sweeper's timer's
	closed atomic.Bool

	reconfMu sync.Mutex                       // one Reconfigure at a time
	reconf   atomic.Pointer[ratelimit.Config] // the last Reconfigure's config; nil before
}

// New validates cfg and starts the sweeper.
func New(cfg Config) (*Limiter, error) {
	if cfg.New == nil {
		return nil, fmt.Errorf("%w: partitioned: New is required", ratelimit.ErrInvalidConfig)
	}
	if cfg.Overflow != nil && check.IsNil(cfg.Overflow) {
		return nil, fmt.Errorf("%w: partitioned: Overflow is a nil %T", ratelimit.ErrInvalidConfig, cfg.Overflow)
	}
	if cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("%w: partitioned: IdleTimeout must not be negative, got %v", ratelimit.ErrInvalidConfig, cfg.IdleTimeout)
	}
	if cfg.MaxPartitions < 0 || cfg.MaxPartitions > maxPartitions {
		return nil, fmt.Errorf("%w: partitioned: MaxPartitions must be in [0, %d], got %d", ratelimit.ErrInvalidConfig, maxPartitions, cfg.MaxPartitions)
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Minute
	}
	if cfg.MaxPartitions == 0 {
		cfg.MaxPartitions = 1 << 20
	}
	l := &Limiter{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].slots = make([]uint64, minSlots)
	}
	l.mu.Lock() // the sweeper re-arms itself under l.mu, maybe before this returns
	l.stop = l.afterFunc(l.sweepEvery(), l.sweep)
	l.mu.Unlock()
	return l, nil
}

// afterFunc sets a timer on the configured clock, or the system's.
func (l *Limiter) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if l.cfg.Clock == nil {
		return time.AfterFunc(d, f).Stop
	}
	return l.cfg.Clock.AfterFunc(d, f)
}

// sweepEvery is the sweeper's period: a quarter of IdleTimeout, so a
// partition is evicted at most 1.25×IdleTimeout after it became idle.
func (l *Limiter) sweepEvery() time.Duration { return max(l.cfg.IdleTimeout/4, time.Millisecond) }

// maxPartitions keeps the store's places within uint32.
const maxPartitions = math.MaxInt32

// hash returns key's shard and the hash that places it in the shard.
func (l *Limiter) hash(key string) (*shard, uint32) {
	h := maphash.String(l.seed, key)
	return &l.shards[h>>58], uint32(h) // shards = 64: the top 6 bits
}

// check reports what makes a call invalid before any partition is looked
// up or created: a Limiter not made by New (ratelimit.ErrInvalidConfig),
// negative permits (ratelimit.ErrInvalidPermits), a nil ctx
// (ratelimit.ErrNilContext) or a done one (ctx.Err()). Permits over the
// partition's capacity are its limiter's to report.
func (l *Limiter) check(ctx context.Context, permits int) error {
	if l == nil || l.cfg.New == nil {
		return fmt.Errorf("%w: partitioned: a Limiter must be made by New", ratelimit.ErrInvalidConfig)
	}
	if permits < 0 {
		return base.CheckPermits(permits, math.MaxInt64)
	}
	return base.CheckContext(ctx)
}

// Acquire takes permits from key's partition now, or refuses. An
// invalid call (see Wait) is reported before any partition is looked up
// or created. A status check (permits == 0) of a key without a partition
// makes one, as any call does (and may so take an idle one's place): while
// MaxPartitions busy partitions leave no room, it is refused
// (ReasonNoPartition) or goes to Overflow, as a request on that key would.
func (l *Limiter) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	return l.take(ctx, key, permits, false)
}

// Wait takes permits from key's partition, waiting until ctx is done.
// Negative permits (ratelimit.ErrInvalidPermits), a nil ctx
// (ratelimit.ErrNilContext), a done one (ctx.Err()) and a Limiter not made
// by New (ratelimit.ErrInvalidConfig) are reported before any partition is
// looked up or created; then a closed Limiter returns ratelimit.ErrClosed.
// The partition's limiter tells its queueing to ctx's waittrace hooks.
func (l *Limiter) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	return l.take(ctx, key, permits, true)
}

// take checks the call, then asks key's partition for permits: it
// waits if wait is set, and asks now (Acquire) otherwise.
func (l *Limiter) take(ctx context.Context, key string, permits int, wait bool) (ratelimit.Lease, error) {
	if err := l.check(ctx, permits); err != nil {
		return ratelimit.Lease{}, err
	}
	lim, p, lease, err := l.get(key)
	if lim == nil {
		return lease, err
	}
	if wait {
		lease, err = lim.Wait(ctx, permits)
	} else {
		lease, err = lim.Acquire(ctx, permits)
	}
	if p == nil { // Overflow's
		return l.fromOverflow(lease, permits), err
	}
	p.done()
	return lease, err
}

// overflowGrant is the Releaser of a grant that the Overflow limiter made:
// it keeps that limiter's own lease, so that Release releases it and
// Refund gives it back to Overflow, never to a partition of the key. (The
// key's partition, made since, could take it as its own: the limiters of
// one memory.Factory cannot tell each other's grants apart.)
type overflowGrant struct {
	o     ratelimit.Outcome
	owner *Limiter // whose Overflow made it
	lease ratelimit.Lease
}

func (g *overflowGrant) Release(uint64) { g.lease.Release() }

// fromOverflow returns lease, the Overflow limiter's answer to a request
// of permits, as its caller gets it: a grant of permits is marked (see
// overflowGrant, one allocation: Overflow serves only while MaxPartitions
// are busy), with the same figures; anything else is returned as it is.
func (l *Limiter) fromOverflow(lease ratelimit.Lease, permits int) ratelimit.Lease {
	if !lease.Acquired() || permits == 0 {
		return lease
	}
	g := &overflowGrant{owner: l, lease: lease}
	g.o = ratelimit.Outcome{Limit: lease.Limit(), Releaser: g, Grows: lease.Outcome().Grows}
	return g.o.Lease(lease.Remaining(), 0, lease.ResetAfter(), 0)
}

// Refund takes back lease, a grant of permits that Acquire or Wait made
// for key (see control.Refund), as Chain does with the grants of its
// members: it passes it to the limiter that made it (key's partition's,
// or Overflow's), which refunds it when it can and else releases it (what
// a grant holds, as a concurrency permit, is given back; a rate limiter's
// grant stays spent).
// It never creates a partition: when key's partition is gone
// (evicted idle), the lease is released, and what it took stays spent
// until it comes back with time. With memory limiters an idle partition
// has had it back already; a Redis handle is idle at once, so a refund
// that comes after its eviction leaves the permits spent (stricter than
// the limit, never looser). A done ctx is passed on as it is: a refund is
// not a decision (the backend's Refund says what it does with it; memory's
// gives the permits back all the same).
func (l *Limiter) Refund(ctx context.Context, key string, lease ratelimit.Lease, permits int) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if err := l.check(context.WithoutCancel(ctx), permits); err != nil {
		return err
	}
	if l.closed.Load() {
		return ratelimit.ErrClosed
	}
	if o := lease.Outcome(); o != nil {
		if g, ok := o.Releaser.(*overflowGrant); ok && g.owner == l && o == &g.o {
			return undo(ctx, l.cfg.Overflow, g.lease, permits)
		}
	}
	p := l.lookup(key)
	if p == nil {
		lease.Release()
		return nil
	}
	defer p.done()
	return undo(ctx, p.limiter, lease, permits)
}

// lookup returns key's partition, raised by one call in flight (done ends
// it), or nil when key has none: it makes none.
func (l *Limiter) lookup(key string) *partition {
	s, h := l.hash(key)
	s.mu.RLock()
	_, p := s.find(&l.store, key, h)
	if p != nil {
		p.inflight.Add(1) // under the read lock: the sweeper cannot take p now
	}
	s.mu.RUnlock()
	return p
}

// undo gives back lease, a grant of permits that lim made: Refund when lim
// can (control.Refund), Release otherwise.
func undo(ctx context.Context, lim ratelimit.Limiter, lease ratelimit.Lease, permits int) error {
	if r, ok := control.As[refunder](lim); ok {
		return r.Refund(ctx, lease, permits)
	}
	lease.Release()
	return nil
}

type refunder interface {
	Refund(ctx context.Context, lease ratelimit.Lease, permits int) error
}

// Idler is a limiter that can tell when dropping it and making a new one
// of the same config would change no decision: IdleFor reports ok when the
// limiter is in its initial state (full bucket, empty window, nothing
// held, nobody waiting, no call in flight) and d, how long it has been so,
// as far as the limiter knows (at least how long it has been unused).
// Every limiter of this module is one, directly or through Unwrap (see
// package control); a partition is evicted only when its limiter is idle.
type Idler interface {
	IdleFor() (d time.Duration, ok bool)
}

// get returns the limiter that serves key: its partition's, which p
// holds by one in-flight call until the caller's p.done, or the overflow
// limiter (p nil). When there is none, lim is nil and lease, err
// are the answer.
func (l *Limiter) get(key string) (lim ratelimit.Limiter, p *partition, lease ratelimit.Lease, err error) {
	if l.closed.Load() {
		return nil, nil, lease, ratelimit.ErrClosed
	}
	s, h := l.hash(key)
	s.mu.RLock()
	_, p = s.find(&l.store, key, h)
	if p != nil {
		p.inflight.Add(1) // under the read lock: the sweeper cannot take p now
	}
	s.mu.RUnlock()
	if p != nil {
		return p.limiter, p, lease, nil
	}
	switch p, err = l.create(s, key, h); {
	case p != nil:
		return p.limiter, p, lease, nil
	case err != nil:
		return nil, nil, lease, err
	case l.cfg.Overflow != nil:
		return l.cfg.Overflow, nil, lease, nil
	}
	l.stats.refused.Add(1)
	return nil, nil, (&noPartition).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonNoPartition, 0), nil
}

// create makes key's partition, raised by one in-flight call, or returns nil
// when MaxPartitions are busy. The factory runs outside the lock; when two
// calls race to create one key, one partition wins and the other limiter is
// closed unused.
func (l *Limiter) create(s *shard, key string, h uint32) (*partition, error) {
	lim, err := l.cfg.New(key)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrNoPartition, key, err)
	}
	if check.IsNil(lim) {
		return nil, fmt.Errorf("%w %q: %w: Config.New returned a nil limiter (%T) and no error", ErrNoPartition, key, ratelimit.ErrInvalidConfig, lim)
	}
	if _, ok := control.As[Idler](lim); !ok {
		l.discard(key, lim, nil) // it was made for this partition: closed, as any discarded
		return nil, fmt.Errorf("%w %q: %w: Config.New returned a %T, which is not an Idler: its partition could never be evicted", ErrNoPartition, key, ratelimit.ErrInvalidConfig, lim)
	}
	applied := l.reconf.Load()
	reconfigureNew(lim, applied)
	var closed []closeError // of partitions evicted to make room, reported once unlocked
	s.mu.Lock()
	if l.closed.Load() {
		s.mu.Unlock()
		l.discard(key, lim, nil)
		return nil, ratelimit.ErrClosed
	}
	i, p := s.find(&l.store, key, h)
	if p != nil { // another call created it
		p.inflight.Add(1)
		s.mu.Unlock()
		l.discard(key, lim, nil)
		return p, nil
	}
	// The new partition is counted only while live is below the bound, so
	// Stats never reads more than MaxPartitions, and the bound stays exact
	// while other shards create theirs.
	for {
		n := l.live.Load()
		if n < int64(l.cfg.MaxPartitions) {
			if l.live.CompareAndSwap(n, n+1) {
				break
			}
			continue
		}
		if !l.makeRoom(s, &closed) {
			s.mu.Unlock()
			l.discard(key, lim, closed)
			return nil, nil
		}
		i, _ = s.find(&l.store, key, h) // eviction moves slots
	}
	if rc := l.reconf.Load(); rc != applied {
		// A Reconfigure came while New ran; its sweep of this shard may
		// have passed already.
		reconfigureNew(lim, rc)
	}
	id := l.store.alloc()
	p = l.store.at(id)
	p.key, p.limiter = key, lim
	p.inflight.Add(1)
	s.insert(i, h, id)
	l.stats.created.Add(1)
	s.mu.Unlock()
	l.report(closed)
	return p, nil
}

// Stats returns the partition counters; Live never exceeds MaxPartitions.
// A nil Limiter has none.
func (l *Limiter) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	return Stats{Live: l.live.Load(), Created: l.stats.created.Load(), Evicted: l.stats.evicted.Load(), Refused: l.stats.refused.Load()}
}

// Close stops the sweeper and closes every partition's limiter (their
// queued waiters are refused); later calls return ratelimit.ErrClosed. It
// returns the errors of closing the limiters, joined (errors.Join), each
// naming its key. Safe to call twice: the second call returns nil. Close
// of a nil Limiter returns nil.
func (l *Limiter) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return nil
	}
	if l.stop != nil {
		l.stop()
	}
	l.mu.Unlock()
	var errs []error
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for j, v := range s.slots {
			if v != 0 { // the record stays: calls in flight read its limiter
				p := l.store.at(uint32(v) - 1)
				if err := closeLimiter(p.limiter); err != nil {
					errs = append(errs, fmt.Errorf("partitioned: closing the limiter of %q: %w", p.key, err))
				}
				s.slots[j] = 0
			}
		}
		s.n = 0
		s.mu.Unlock()
	}
	l.live.Store(0)
	return errors.Join(errs...)
}
