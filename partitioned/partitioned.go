// Package partitioned keeps one limiter per resource: per user, per client
// IP, per tenant, per upstream host. Partitions are created on first use and
// evicted when they have been idle (back in their initial state, nobody
// waiting, no call in flight) for IdleTimeout, so memory is bounded by the
// active resources and eviction never changes a decision: a partition
// created again decides exactly as the evicted one would have.
//
// MaxPartitions bounds the partitions alive at once. When it is reached, a
// new resource takes the place of an idle partition, in any shard (a few
// partitions are looked at in each); when none is found idle, the new
// resource is refused (ratelimit.ReasonNoPartition) or, when Overflow is
// set, shares that limiter. Active partitions are never evicted to make
// room.
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
	"math/rand/v2"
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
	// MaxPartitions bounds the partitions alive at once; zero means 1<<20,
	// and it may be at most math.MaxInt32.
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
	store  store
	live   atomic.Int64
	stats  struct{ created, evicted, refused atomic.Int64 }

	mu     sync.Mutex // guards timer and closed
	timer  ratelimit.Timer
	closed atomic.Bool
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
	if cfg.IdleTimeout < 0 || cfg.MaxPartitions < 0 || cfg.MaxPartitions > maxPartitions {
		return nil, fmt.Errorf("%w: partitioned: IdleTimeout %v must not be negative, MaxPartitions %d must be in [0, %d]", ratelimit.ErrInvalidConfig, cfg.IdleTimeout, cfg.MaxPartitions, maxPartitions)
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
		l.shards[i].slots = make([]uint64, minSlots)
	}
	l.timer = cfg.Clock.AfterFunc(l.sweepEvery(), l.sweep)
	return l, nil
}

// sweepEvery is the sweeper's period: a quarter of IdleTimeout, so a
// partition is evicted at most 1.25×IdleTimeout after it became idle.
func (l *Limiter[R]) sweepEvery() time.Duration { return max(l.cfg.IdleTimeout/4, time.Millisecond) }

// maxPartitions keeps the store's places within uint32.
const maxPartitions = math.MaxInt32

// hash returns key's shard and the hash that places it in the shard.
func (l *Limiter[R]) hash(key string) (*shard, uint32) {
	h := maphash.String(l.seed, key)
	return &l.shards[h>>58], uint32(h) // shards = 64: the top 6 bits
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
	return nil, nil, noPartition.Lease(ratelimit.Decision{RetryAfter: -1}, ratelimit.ReasonNoPartition), nil
}

// create makes key's partition, raised by one in-flight call, or returns nil
// when MaxPartitions are busy. The factory runs outside the lock; when two
// calls race to create one key, one partition wins and the other limiter is
// closed unused.
func (l *Limiter[R]) create(s *shard, key string, h uint32) (*partition, error) {
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
	i, p := s.find(&l.store, key, h)
	if p != nil { // another call created it
		p.inflight.Add(1)
		s.mu.Unlock()
		closeLimiter(lim)
		return p, nil
	}
	// Counting the new partition first keeps MaxPartitions exact while
	// other shards create theirs.
	for l.live.Add(1) > int64(l.cfg.MaxPartitions) {
		l.live.Add(-1)
		if !l.makeRoom(s) {
			s.mu.Unlock()
			closeLimiter(lim)
			return nil, nil
		}
		i, _ = s.find(&l.store, key, h) // eviction moves slots
	}
	id := l.store.alloc()
	p = l.store.at(id)
	p.key, p.limiter = key, lim
	p.inflight.Add(1)
	s.insert(i, h, id)
	l.stats.created.Add(1)
	s.mu.Unlock()
	return p, nil
}

// makeRoom evicts one idle partition to make room for a new one in s: one
// of s's, or else one of another shard whose lock is free (waiting for it
// while holding s's could deadlock with a call doing the same the other way).
// Requires s.mu.
func (l *Limiter[R]) makeRoom(s *shard) bool {
	if l.evictOne(s) {
		return true
	}
	start := rand.IntN(shards)
	for k := range shards {
		o := &l.shards[(start+k)%shards]
		if o == s || !o.mu.TryLock() {
			continue
		}
		ok := l.evictOne(o)
		o.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// evictOne evicts one idle partition of s, looking at a few at most from a
// random slot on. Requires s.mu.
func (l *Limiter[R]) evictOne(s *shard) bool {
	mask := len(s.slots) - 1
	seen, start := 0, rand.IntN(len(s.slots))
	for k := range s.slots {
		i := (start + k) & mask
		if s.slots[i] == 0 {
			continue
		}
		if _, idle := l.idle(s, i); idle {
			l.evict(s, i)
			return true
		}
		if seen++; seen == 8 {
			break
		}
	}
	return false
}

// idle reports whether the partition in slot i is in its initial state
// with nothing in flight, and for how long. Requires s.mu (write), so
// in-flight counts cannot rise.
func (l *Limiter[R]) idle(s *shard, i int) (time.Duration, bool) {
	p := l.store.at(uint32(s.slots[i]) - 1)
	if p.inflight.Load() != 0 {
		return 0, false
	}
	il, ok := p.limiter.(idler)
	if !ok {
		return 0, false
	}
	return il.IdleFor()
}

// evict removes the partition in slot i and frees its place. Requires s.mu.
func (l *Limiter[R]) evict(s *shard, i int) {
	id := uint32(s.slots[i]) - 1
	s.remove(i)
	l.live.Add(-1)
	l.stats.evicted.Add(1)
	p := l.store.at(id)
	closeLimiter(p.limiter)
	p.key, p.limiter = "", nil
	l.store.release(id)
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
		for j := 0; j < len(s.slots); j++ {
			// Eviction moves later slots back into j, so j is looked at again.
			for s.slots[j] != 0 {
				if d, idle := l.idle(s, j); !idle || d < l.cfg.IdleTimeout {
					break
				}
				l.evict(s, j)
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
		for j, v := range s.slots {
			if v != 0 { // the record stays: calls in flight read its limiter
				closeLimiter(l.store.at(uint32(v) - 1).limiter)
				s.slots[j] = 0
			}
		}
		s.n = 0
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
