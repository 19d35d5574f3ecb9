// Package partitioned keeps one limiter per resource: per user, per client
// IP, per tenant, per upstream host. Partitions are created on first use and
// evicted when they have been idle (back in their initial state, nobody
// waiting, no call in flight) for IdleTimeout, so memory is bounded by the
// active resources and eviction never changes a decision: a partition
// created again decides exactly as the evicted one would have.
//
// MaxPartitions bounds the partitions alive at once. When it is reached, a
// new resource may take the place of an idle partition; when none is idle,
// the new resource is refused (ratelimit.ReasonNoPartition) or, when
// Overflow is set, shares that limiter. Active partitions are never evicted
// to make room.
//
// One sweeper (a timer re-armed after each sweep, never one per key) does
// the eviction. The partitions may be memory limiters or redis handles
// (the state then lives in Redis; the handle is all that is evicted).
package partitioned

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
)

// Config configures a partitioned limiter over resources of type R.
type Config[R any] struct {
	// Key maps a resource to its partition key. Required.
	Key func(R) string
	// New creates the limiter of a partition; it sees the key, so it may
	// choose a config per key (or return NoLimit for exempt ones). It runs
	// outside every lock. Required.
	New func(key string) (ratelimit.Limiter, error)
	// IdleTimeout is how long a partition must have been idle to be evicted
	// by the sweeper. Zero means one minute.
	IdleTimeout time.Duration
	// MaxPartitions bounds the partitions alive at once; zero means 1<<20.
	MaxPartitions int
	// Overflow, if set, serves new resources while MaxPartitions are busy;
	// otherwise they are refused with ReasonNoPartition.
	Overflow ratelimit.Limiter
	// Clock drives the sweeper; nil means the system clock.
	Clock ratelimit.Clock
}

// Stats counts partitions.
type Stats struct {
	Live    int64 // partitions alive now
	Created int64 // partitions created since New
	Evicted int64 // partitions evicted (idle)
	Refused int64 // requests refused because MaxPartitions were busy
}

// ErrNoPartition wraps a factory error, so that errors.Is finds the cause.
var ErrNoPartition = errors.New("partitioned: cannot create partition")

// The leases of refusals for want of a partition (capacity 0) and of NoLimit
// (capacity -1: none).
var noPartition, unlimited = ratelimit.MakeLeases(0), ratelimit.MakeLeases(-1)

const shards = 64

// Limiter is a partitioned limiter; safe for concurrent use.
type Limiter[R any] struct {
	cfg    Config[R]
	seed   maphash.Seed
	shards [shards]shard
	live   atomic.Int64
	stats  struct{ created, evicted, refused atomic.Int64 }

	mu     sync.Mutex // guards timer and closed
	timer  ratelimit.Timer
	closed atomic.Bool
}

type shard struct {
	mu         sync.RWMutex
	partitions map[string]*partition
	free       []*partition // evicted, for reuse: nobody holds them (evicted with nothing in flight)
	spare      []partition  // allocated in chunks, not yet used
}

type partition struct {
	limiter  ratelimit.Limiter
	inflight atomic.Int32 // calls that hold this partition; raised under the shard's read lock
}

// done ends a call that get counted in flight; nothing for no partition.
func (p *partition) done() {
	if p != nil {
		p.inflight.Add(-1)
	}
}

// idler is implemented by limiters that can tell they are in their initial state.
type idler interface {
	IdleFor() (time.Duration, bool)
}

// New validates cfg and starts the sweeper.
func New[R any](cfg Config[R]) (*Limiter[R], error) {
	if cfg.Key == nil || cfg.New == nil {
		return nil, fmt.Errorf("%w: partitioned: Key and New are required", ratelimit.ErrInvalidConfig)
	}
	if cfg.IdleTimeout < 0 || cfg.MaxPartitions < 0 {
		return nil, fmt.Errorf("%w: partitioned: IdleTimeout %v and MaxPartitions %d must not be negative", ratelimit.ErrInvalidConfig, cfg.IdleTimeout, cfg.MaxPartitions)
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Minute
	}
	if cfg.MaxPartitions == 0 {
		cfg.MaxPartitions = 1 << 20
	}
	if cfg.Clock == nil {
		cfg.Clock = ratelimit.SystemClock
	}
	l := &Limiter[R]{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].partitions = map[string]*partition{}
	}
	l.timer = cfg.Clock.AfterFunc(l.sweepEvery(), l.sweep)
	return l, nil
}

// sweepEvery is the sweeper's period: a quarter of IdleTimeout, so a
// partition is evicted at most 1.25×IdleTimeout after it became idle.
func (l *Limiter[R]) sweepEvery() time.Duration { return max(l.cfg.IdleTimeout/4, time.Millisecond) }

func (l *Limiter[R]) shardOf(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)%shards]
}

// Acquire takes permits from resource's partition now, or refuses.
func (l *Limiter[R]) Acquire(ctx context.Context, resource R, permits int) (ratelimit.Lease, error) {
	lim, p, lease, err := l.get(resource)
	if lim == nil {
		return lease, err
	}
	defer p.done()
	return lim.Acquire(ctx, permits)
}

// Wait takes permits from resource's partition, waiting until ctx is done.
func (l *Limiter[R]) Wait(ctx context.Context, resource R, permits int) (ratelimit.Lease, error) {
	lim, p, lease, err := l.get(resource)
	if lim == nil {
		return lease, err
	}
	defer p.done()
	return lim.Wait(ctx, permits)
}

// get returns the limiter that serves resource: its partition's, which p
// holds by one in-flight call until the caller's p.done, or the overflow
// limiter (p nil). When there is none, lim is nil and lease, err
// are the answer.
func (l *Limiter[R]) get(resource R) (lim ratelimit.Limiter, p *partition, lease ratelimit.Lease, err error) {
	if l.closed.Load() {
		return nil, nil, lease, ratelimit.ErrClosed
	}
	key := l.cfg.Key(resource)
	s := l.shardOf(key)
	s.mu.RLock()
	p = s.partitions[key]
	if p != nil {
		p.inflight.Add(1) // under the read lock: the sweeper cannot take p now
	}
	s.mu.RUnlock()
	if p != nil {
		return p.limiter, p, lease, nil
	}
	switch p, err = l.create(s, key); {
	case p != nil:
		return p.limiter, p, lease, nil
	case err != nil:
		return nil, nil, lease, err
	case l.cfg.Overflow != nil:
		return l.cfg.Overflow, nil, lease, nil
	}
	l.stats.refused.Add(1)
	return nil, nil, noPartition.Lease(ratelimit.Decision{RetryAfter: -1}, ratelimit.ReasonNoPartition), nil
}

// create makes key's partition, raised by one in-flight call, or returns nil
// when MaxPartitions are busy. The factory runs outside the lock; when two
// calls race to create one key, one partition wins and the other limiter is
// closed unused.
func (l *Limiter[R]) create(s *shard, key string) (*partition, error) {
	lim, err := l.cfg.New(key)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrNoPartition, key, err)
	}
	s.mu.Lock()
	if l.closed.Load() {
		s.mu.Unlock()
		closeLimiter(lim)
		return nil, ratelimit.ErrClosed
	}
	if p := s.partitions[key]; p != nil { // another call created it
		p.inflight.Add(1)
		s.mu.Unlock()
		closeLimiter(lim)
		return p, nil
	}
	if l.live.Load() >= int64(l.cfg.MaxPartitions) && !l.evictOne(s) {
		s.mu.Unlock()
		closeLimiter(lim)
		return nil, nil
	}
	var p *partition
	if n := len(s.free); n > 0 {
		p, s.free = s.free[n-1], s.free[:n-1]
	} else {
		if len(s.spare) == 0 {
			// Chunks double up to 64 partitions: one allocation per
			// partition for a few, a sixty-fourth of one for many.
			s.spare = make([]partition, min(max(len(s.partitions), 1), 64))
		}
		p, s.spare = &s.spare[0], s.spare[1:]
	}
	p.limiter = lim
	p.inflight.Add(1)
	s.partitions[key] = p
	l.live.Add(1)
	l.stats.created.Add(1)
	s.mu.Unlock()
	return p, nil
}

// evictOne evicts one idle partition of s, looking at a few at most (map
// order is random), to make room for a new one. Requires s.mu.
func (l *Limiter[R]) evictOne(s *shard) bool {
	seen := 0
	for key, p := range s.partitions {
		if _, idle := l.idle(p); idle {
			l.evict(s, key, p)
			return true
		}
		if seen++; seen == 8 {
			break
		}
	}
	return false
}

// idle reports whether p is in its initial state with nothing in flight,
// and for how long. Requires s.mu (write), so in-flight counts cannot rise.
func (l *Limiter[R]) idle(p *partition) (time.Duration, bool) {
	if p.inflight.Load() != 0 {
		return 0, false
	}
	i, ok := p.limiter.(idler)
	if !ok {
		return 0, false
	}
	return i.IdleFor()
}

// evict removes p and keeps it for reuse. Requires s.mu.
func (l *Limiter[R]) evict(s *shard, key string, p *partition) {
	delete(s.partitions, key)
	l.live.Add(-1)
	l.stats.evicted.Add(1)
	closeLimiter(p.limiter)
	p.limiter = nil
	s.free = append(s.free, p)
}

func closeLimiter(lim ratelimit.Limiter) {
	if c, ok := lim.(io.Closer); ok {
		c.Close()
	}
}

// sweep evicts every partition idle for IdleTimeout, then re-arms itself.
func (l *Limiter[R]) sweep() {
	for i := range l.shards {
		if l.closed.Load() {
			return
		}
		s := &l.shards[i]
		s.mu.Lock()
		for key, p := range s.partitions {
			if d, idle := l.idle(p); idle && d >= l.cfg.IdleTimeout {
				l.evict(s, key, p)
			}
		}
		s.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed.Load() {
		l.timer.Reset(l.sweepEvery())
	}
}

// Stats returns the partition counters.
func (l *Limiter[R]) Stats() Stats {
	return Stats{Live: l.live.Load(), Created: l.stats.created.Load(), Evicted: l.stats.evicted.Load(), Refused: l.stats.refused.Load()}
}

// Close stops the sweeper and closes every partition (their queued waiters
// are refused); later calls return ratelimit.ErrClosed. Safe to call twice.
func (l *Limiter[R]) Close() error {
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return nil
	}
	l.timer.Stop()
	l.mu.Unlock()
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for key, p := range s.partitions {
			delete(s.partitions, key)
			closeLimiter(p.limiter)
		}
		s.mu.Unlock()
	}
	l.live.Store(0)
	return nil
}

// For returns the plain ratelimit.Limiter of one resource, for Chain or for
// code written against the interface.
func (l *Limiter[R]) For(resource R) ratelimit.Limiter { return bound[R]{l, resource} }

type bound[R any] struct {
	l *Limiter[R]
	r R
}

func (b bound[R]) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return b.l.Acquire(ctx, b.r, permits)
}

func (b bound[R]) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return b.l.Wait(ctx, b.r, permits)
}

// NoLimit returns a limiter that grants everything, for resources that must
// never be limited (return it from Config.New for their keys). It is always
// idle, so such partitions cost nothing once unused.
func NoLimit() ratelimit.Limiter { return noLimit{} }

type noLimit struct{}

func (noLimit) Acquire(_ context.Context, permits int) (ratelimit.Lease, error) {
	if permits < 0 {
		return ratelimit.Lease{}, ratelimit.CheckPermits(permits, 0)
	}
	return unlimited.Lease(ratelimit.Decision{Granted: true, Remaining: -1, RetryAfter: -1}, ratelimit.ReasonNone), nil
}

func (n noLimit) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return n.Acquire(ctx, permits)
}

func (noLimit) IdleFor() (time.Duration, bool) { return math.MaxInt64, true }
