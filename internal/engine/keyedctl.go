package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/base"
)

// For returns the limiter of key: see memory.Keyed.
func (s *store[S]) For(key string) ratelimit.Limiter { return keyOf[S]{s, key} }

// keyOf is the limiter of one key of a store.
type keyOf[S any] struct {
	s   *store[S]
	key string
}

func (k keyOf[S]) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return k.s.Acquire(ctx, k.key, permits)
}

func (k keyOf[S]) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return k.s.Wait(ctx, k.key, permits)
}

func (k keyOf[S]) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	return k.s.refund(ctx, k.key, lease, permits)
}

func (k keyOf[S]) Reset(ctx context.Context) error { return k.s.reset(ctx, k.key) }

func (k keyOf[S]) IdleFor() (time.Duration, bool) { return k.s.idleOf(k.key) }

func (k keyOf[S]) CheckPermits(permits int) error {
	return base.CheckPermits(permits, k.s.p.cur.Load().capacity)
}

func (k keyOf[S]) Backend() string { return "memory" }

// refund is a limiter's Refund (see Limiter), on key: a held limiter's
// own, or the model's Refund of the state in the table. A key without an
// entry is in its initial state, to which a refund adds nothing.
func (s *store[S]) refund(ctx context.Context, key string, lease ratelimit.Lease, permits int) error {
	c := s.p.cur.Load()
	if permits < 0 || !c.has(Releases) && int64(permits) > c.capacity {
		if err := base.CheckPermits(permits, c.capacity); err != nil {
			return err
		}
	}
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	sh, h, hd, err := s.open(key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if hd != nil {
		return hd.l.Refund(ctx, lease, permits)
	}
	if !s.inline { // the lease's limiter was evicted, idle: nothing is held
		lease.Release()
		return nil
	}
	if permits == 0 || !c.has(Refunds) {
		return nil
	}
	now := s.now()
	s.sync(sh, now)
	i, ok := sh.find(key, h)
	if !ok {
		return nil
	}
	// A grant made under a configuration since replaced is not recognised.
	at, ok := (&sh.c.infos[0]).Token(lease)
	if ok {
		sl := &sh.slots[i]
		sl.s = sh.c.model.Refund(sl.s, now, int64(at), int64(permits))
	}
	return nil
}

// open locks key's shard and returns it, key's hash and key's held limiter
// (nil when key's state, if any, is in the table); the caller unlocks the
// shard. A closed store is ErrClosed, the shard left unlocked.
func (s *store[S]) open(key string) (*shard[S], uint32, *held[S], error) {
	sh, h := s.shard(key)
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil, 0, nil, ratelimit.ErrClosed
	}
	return sh, h, sh.held[key], nil
}

// reset puts key back in its initial state, as a limiter's Reset does.
func (s *store[S]) reset(ctx context.Context, key string) error {
	if err := base.CheckContext(ctx); err != nil {
		return err
	}
	sh, h, hd, err := s.open(key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if hd != nil {
		return hd.l.Reset(ctx)
	}
	s.sync(sh, s.now())
	if i, ok := sh.find(key, h); ok {
		sh.slots[i].s = sh.c.model.Initial()
	}
	return nil
}

// idleOf is key's IdleFor: a key without an entry is idle for ever.
func (s *store[S]) idleOf(key string) (time.Duration, bool) {
	sh, h := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if hd := sh.held[key]; hd != nil {
		return hd.idleFor()
	}
	now := s.now()
	if !sh.closed {
		s.sync(sh, now)
	}
	if i, ok := sh.find(key, h); ok {
		return idleState(sh.c, sh.slots[i].s, now)
	}
	return math.MaxInt64, true
}

// Reconfigure validates cfg and applies it to every key: see
// memory.Keyed.
func (s *store[S]) Reconfigure(cfg ratelimit.Config) error {
	c, err := makeConf(cfg, s.p.cur.Load().newModel)
	if err != nil {
		return err
	}
	s.reconfMu.Lock()
	defer s.reconfMu.Unlock()
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	cur := s.p.cur.Load()
	if cur.cfg == c.cfg { // the config in force changes nothing
		return nil
	}
	c.cur, c.clock = cur.cur, cur.clock
	c.cur.Store(c)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if !sh.closed {
			s.sync(sh, s.now())
		}
		sh.mu.Unlock()
	}
	return nil
}

// sync carries every key of sh over to the configuration in force, at
// now, when sh is under an older one: a state of the table by carry's
// rule; a held limiter as its Reconfigure does (its queue examined again
// at once). Requires sh.mu.
func (s *store[S]) sync(sh *shard[S], now int64) {
	old, c := sh.c, s.p.cur.Load()
	if old == c {
		return
	}
	for i := range sh.slots {
		if sl := &sh.slots[i]; sl.used {
			sl.s = carry(old, c, sl.s, now)
		}
	}
	for _, hd := range sh.held {
		l := &hd.l
		l.mu.Lock()
		if !l.closed {
			l.sync(now)
			if l.head != nil {
				l.serve(now)
			}
		}
		l.mu.Unlock()
	}
	sh.c = c
}

// Config is the configuration in force.
func (s *store[S]) Config() ratelimit.Config { return s.p.cur.Load().cfg }

// Stats returns the key counters.
func (s *store[S]) Stats() KeyedStats {
	return KeyedStats{Keys: s.live.Load(), Created: s.created.Load(), Evicted: s.evicted.Load(), Refused: s.refused.Load()}
}

// Close refuses the queued waiters of every key and ends the store; safe
// to call twice.
func (s *store[S]) Close() error {
	s.mu.Lock()
	if s.closed.Swap(true) {
		s.mu.Unlock()
		return nil
	}
	if s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.closed = true
		for _, hd := range sh.held {
			hd.l.Close()
		}
		sh.slots, sh.n, sh.held, sh.peak = make([]slot[S], minSlots), 0, nil, 0
		sh.mu.Unlock()
	}
	s.live.Store(0)
	return nil
}

// afterFunc sets a timer on the store's clock.
func (s *store[S]) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if s.clock == nil {
		return time.AfterFunc(d, f).Stop
	}
	return s.clock.AfterFunc(d, f)
}

// sweepEvery is the sweeper's period: a quarter of the idle timeout, so a
// key is evicted at most 1.25 times that after it became idle.
func (s *store[S]) sweepEvery() time.Duration { return max(s.idle/4, time.Millisecond) }

// sweep evicts the keys idle for the idle timeout, moves back to the table
// the states of held limiters that no Wait holds any more (left by a
// Reconfigure), and shrinks what is left mostly empty; then it re-arms
// itself.
func (s *store[S]) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			return
		}
		now := s.now()
		s.sync(sh, now)
		for j := 0; j < len(sh.slots); j++ {
			// Eviction moves later slots back into j, so j is looked at again.
			for sh.slots[j].used {
				if d, ok := idleState(sh.c, sh.slots[j].s, now); !ok || d < s.idle {
					break
				}
				s.evictSlot(sh, j)
			}
		}
		for k, hd := range sh.held {
			if d, ok := hd.idleFor(); ok && d >= s.idle {
				s.evictHeld(sh, k, hd)
			} else if hd.inflight == 0 && s.inline {
				s.demote(sh, k, hd, now)
			}
		}
		sh.shrink()
		sh.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed.Load() {
		s.stop = s.afterFunc(s.sweepEvery(), s.sweep)
	}
}

// evictSlot drops the key of slot i, idle. Requires sh.mu.
func (s *store[S]) evictSlot(sh *shard[S], i int) {
	sh.remove(i)
	s.live.Add(-1)
	s.evicted.Add(1)
}

// evictHeld drops key, held by hd, idle. Requires sh.mu.
func (s *store[S]) evictHeld(sh *shard[S], key string, hd *held[S]) {
	delete(sh.held, key)
	hd.l.Close() // no waiter; a late Release of a lease finds it closed
	s.live.Add(-1)
	s.evicted.Add(1)
}

// makeRoom evicts one idle key (idle now, however briefly) to make room
// for a new one in sh: one of sh's, or else one of another shard whose
// lock is free (waiting for it while holding sh's could deadlock with a
// call doing the same the other way). Requires sh.mu.
func (s *store[S]) makeRoom(sh *shard[S]) bool {
	if s.evictOne(sh) {
		return true
	}
	start := rand.IntN(keyedShards)
	for k := range keyedShards {
		o := &s.shards[(start+k)%keyedShards]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		ok := !o.closed && o.c == s.p.cur.Load() && s.evictOne(o)
		o.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// evictOne evicts an idle key of sh, looking at 8 keys of its table at
// most, from a random slot on, and at 8 of its held keys. Requires sh.mu,
// and sh under the configuration in force.
func (s *store[S]) evictOne(sh *shard[S]) bool {
	now := s.now()
	mask := len(sh.slots) - 1
	seen, start := 0, rand.IntN(len(sh.slots))
	for k := range sh.slots {
		i := (start + k) & mask
		if !sh.slots[i].used {
			continue
		}
		if _, ok := idleState(sh.c, sh.slots[i].s, now); ok {
			s.evictSlot(sh, i)
			return true
		}
		if seen++; seen == 8 {
			break
		}
	}
	seen = 0
	for k, hd := range sh.held { // a map's range starts at a random key
		if _, ok := hd.idleFor(); ok {
			s.evictHeld(sh, k, hd)
			return true
		}
		if seen++; seen == 8 {
			break
		}
	}
	return false
}
