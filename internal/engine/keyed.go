package engine

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
)

// Keyed is a limit per key of one configuration, its state inline: what
// memory.Keyed wraps, and documents.
type Keyed interface {
	Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error)
	Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error)
	For(key string) ratelimit.Limiter
	Reconfigure(cfg ratelimit.Config) error
	Config() ratelimit.Config
	Stats() KeyedStats
	Close() error
}

// KeyedStats counts the keys of a Keyed (see memory.KeyedStats).
type KeyedStats struct {
	Keys, Created, Evicted, Refused int64
}

// A store keeps the model state of each key inline in its index: 64
// shards, each a mutex and an open-addressing table whose slot holds the
// key and its state (keyedtable.go). A decision reads one slot and writes
// the state in place under the shard's mutex, with no record or limiter of
// its own to reach: over many keys in random order, one dependent cache
// miss where a map of pointers to buckets (go-limiter's memorystore) has
// two, and partitioned's index of separate limiters three.
//
// Waiting needs a queue and a timer. So a key whose Wait must queue, and
// every key of a model whose permits come back on Release (a concurrency
// lease holds its key's limiter), is held by a limiter of the engine, to
// which its state moves out of the table (promoted), kept in the shard's
// map of held keys. A key of a rate model goes back to the table when the
// last Wait on it returns (demoted); a releaser's stays held until it is
// evicted.
//
// One sweeper, a timer re-armed after each sweep, evicts the keys idle for
// idle: a state in the table that is initial since then (InitialAt), or a
// held limiter idle since then (IdleFor) with no Wait in flight; a key's
// state is dropped only when it equals a new key's, so eviction never
// changes a decision.
//
// Reconfigure makes the new configuration once, then carries every key's
// state over to it, shard by shard, at the instant it reaches the shard
// (carry's rule, as a limiter's Reconfigure does); a call that finds its
// shard under an older configuration carries the shard first. A shard's c
// is the configuration of the states in its table.
//
// Locks: a shard's mu, then a held limiter's mu; a limiter never calls its
// store.
type store[S any] struct {
	p       *pair[S] // p.cur: the configuration in force; p.l is unused
	seed    maphash.Seed
	clock   ratelimit.Clock // nil: the monotonic clock
	inline  bool            // states live in the table: the model does not release
	idle    time.Duration
	maxKeys int64
	shards  [keyedShards]shard[S]

	live, created, evicted, refused atomic.Int64

	mu     sync.Mutex  // guards stop, and the end of closing
	stop   func() bool // the sweeper's timer's
	closed atomic.Bool

	reconfMu sync.Mutex // one Reconfigure at a time
}

const keyedShards = 64

// shard is the keys whose hash falls in it; every field is guarded by mu.
type shard[S any] struct {
	mu     sync.Mutex
	closed bool
	c      *conf[S]  // the configuration of the states in slots
	slots  []slot[S] // the table: a power of two, at most three quarters used
	n      int       // slots used
	held   map[string]*held[S]
	peak   int      // the most keys held at once since the table or map was made
	_      [56]byte // two cache lines per shard
}

// held is the limiter of a promoted key, and the Waits that hold it
// (guarded by the shard's mu): while one is in flight, the key is neither
// demoted nor evicted.
type held[S any] struct {
	l        limiter[S]
	h        uint32 // the key's hash, for its slot once demoted
	inflight int32
}

// noRoom is the Outcomes of the refusals of a new key while maxKeys keys
// are busy.
var noRoom = backend.MakeOutcomes(0)

// Keyed makes the store of p's configuration (see store).
func (p *pair[S]) Keyed(idle time.Duration, maxKeys int64) Keyed {
	c := p.cur.Load()
	s := &store[S]{p: p, seed: maphash.MakeSeed(), clock: c.clock, inline: !c.has(Releases), idle: idle, maxKeys: maxKeys}
	for i := range s.shards {
		s.shards[i].c = c
		s.shards[i].slots = make([]slot[S], minSlots)
	}
	s.mu.Lock()
	s.stop = s.afterFunc(s.sweepEvery(), s.sweep)
	s.mu.Unlock()
	return s
}

// now is the instant, as a limiter reads it.
func (s *store[S]) now() int64 {
	if s.clock == nil {
		return startUnix + int64(time.Since(start))
	}
	return s.clock.Now().UnixNano()
}

// shard is the shard of key, and the part of key's hash that places it in
// the shard's table.
func (s *store[S]) shard(key string) (*shard[S], uint32) {
	h := maphash.String(s.seed, key)
	return &s.shards[h>>58], uint32(h) // 64 shards: the top 6 bits
}

// check is what Acquire and Wait check before any state is looked at:
// permits against the configuration in force, and ctx.
func (s *store[S]) check(ctx context.Context, permits int) error {
	if c := s.p.cur.Load(); permits < 0 || int64(permits) > c.capacity {
		return base.CheckPermits(permits, c.capacity)
	}
	return base.CheckContext(ctx)
}

// lock locks key's shard, carried over to the configuration in force, and
// checks permits against it (a capacity shrunk since check); now is read
// again when the shard had to be carried. On an error the shard is
// unlocked.
func (s *store[S]) lock(key string, permits int, now *int64) (*shard[S], uint32, error) {
	sh, h := s.shard(key)
	sh.mu.Lock()
	if sh.c != s.p.cur.Load() || sh.closed {
		if sh.closed {
			sh.mu.Unlock()
			return nil, 0, ratelimit.ErrClosed
		}
		*now = s.now()
		s.sync(sh, *now)
		if int64(permits) > sh.c.capacity {
			sh.mu.Unlock()
			return nil, 0, base.CheckPermits(permits, sh.c.capacity)
		}
	}
	return sh, h, nil
}

// Acquire decides at once, as a limiter of its own per key does: see
// memory.Keyed.
func (s *store[S]) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	if err := s.check(ctx, permits); err != nil {
		return ratelimit.Lease{}, err
	}
	var now int64
	if s.inline { // as a limiter does, the time is read before the lock
		now = s.now()
	}
	sh, h, err := s.lock(key, permits, &now)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	p := int64(permits)
	if s.inline {
		if i, ok := sh.find(key, h); ok {
			c, sl := sh.c, &sh.slots[i]
			var d backend.Decision
			sl.s, d = c.model.Step(sl.s, now, p)
			lease := c.lease(d, sl.s, now, p)
			sh.mu.Unlock()
			return lease, nil
		}
	}
	hd := sh.held[key]
	if hd == nil { // a new key
		if !s.admit(sh) {
			sh.mu.Unlock()
			return s.noRoom(), nil
		}
		c := sh.c
		if s.inline {
			st, d := c.model.Step(c.model.Initial(), now, p)
			sh.insert(key, h, st)
			lease := c.lease(d, st, now, p)
			sh.mu.Unlock()
			return lease, nil
		}
		hd = s.hold(sh, key, h, c.model.Initial())
	}
	// A held limiter decides; Acquire never waits, so the shard stays
	// locked and the key cannot be demoted or evicted meanwhile.
	lease, err := hd.l.Acquire(ctx, permits)
	sh.mu.Unlock()
	return lease, err
}

// Wait takes permits, queueing as a limiter of its own per key does: see
// memory.Keyed.
func (s *store[S]) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	if err := s.check(ctx, permits); err != nil {
		return ratelimit.Lease{}, err
	}
	var now int64
	if s.inline {
		now = s.now()
	}
	sh, h, err := s.lock(key, permits, &now)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	p := int64(permits)
	var hd *held[S]
	moved := false // the state has just moved to a new limiter, refused at once
	if s.inline {
		// A limiter's Wait: a grant at once, or the state (moved on by the
		// refusal, as a limiter keeps it) goes to a limiter, where it
		// queues.
		if i, ok := sh.find(key, h); ok {
			c, sl := sh.c, &sh.slots[i]
			var d backend.Decision
			if sl.s, d = c.model.Step(sl.s, now, p); d.Granted {
				lease := c.lease(d, sl.s, now, p)
				sh.mu.Unlock()
				return lease, nil
			}
			st := sl.s
			sh.remove(i)
			hd, moved = s.hold(sh, key, h, st), true
		}
	}
	if hd == nil {
		hd = sh.held[key]
	}
	if hd == nil { // a new key
		if !s.admit(sh) {
			sh.mu.Unlock()
			return s.noRoom(), nil
		}
		c := sh.c
		st := c.model.Initial()
		if s.inline {
			var d backend.Decision
			if st, d = c.model.Step(st, now, p); d.Granted {
				sh.insert(key, h, st)
				lease := c.lease(d, st, now, p)
				sh.mu.Unlock()
				return lease, nil
			}
			moved = true
		}
		hd = s.hold(sh, key, h, st)
	}
	hd.inflight++
	sh.mu.Unlock()
	var lease ratelimit.Lease
	if moved {
		lease, err = hd.l.waitSlow(ctx, permits)
	} else {
		lease, err = hd.l.Wait(ctx, permits)
	}
	s.done(sh, key, hd)
	return lease, err
}

// hold makes the limiter that holds key, whose hash is h, from state st
// under the shard's configuration. Requires sh.mu.
func (s *store[S]) hold(sh *shard[S], key string, h uint32, st S) *held[S] {
	hd := &held[S]{h: h}
	hd.l.c.Store(sh.c)
	hd.l.state = st
	hd.l.emptied = s.now()
	if sh.held == nil {
		sh.held = make(map[string]*held[S])
	}
	sh.held[key] = hd
	if k := sh.n + len(sh.held); k > sh.peak {
		sh.peak = k
	}
	return hd
}

// done ends a Wait on hd, key's limiter: the last one out moves a rate
// model's state back to the table.
func (s *store[S]) done(sh *shard[S], key string, hd *held[S]) {
	sh.mu.Lock()
	if hd.inflight--; hd.inflight == 0 && s.inline && !sh.closed {
		now := s.now()
		s.sync(sh, now)
		s.demote(sh, key, hd, now)
	}
	sh.mu.Unlock()
}

// demote moves the state of hd, key's limiter with no Wait in flight, back
// to the table, unless the limiter is under another configuration than the
// shard's (a Reconfigure in progress: the next sweep demotes it). Nobody
// waits on it (waiters are Waits in flight), and its leases point to the
// configuration, not to it. Requires sh.mu, and sh carried over to now.
func (s *store[S]) demote(sh *shard[S], key string, hd *held[S], now int64) {
	if sh.held[key] != hd {
		return
	}
	l := &hd.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.head != nil {
		return
	}
	l.sync(now)
	if l.conf() != sh.c {
		return
	}
	if l.x != nil && l.x.stop != nil {
		l.x.stop()
	}
	l.closed = true // a timer that fired already finds nothing to do
	delete(sh.held, key)
	sh.insert(key, hd.h, l.state)
}

// lease is the lease of decision d on p permits at now, which left state
// st, as a limiter makes it (without its counts). Grants carry the instant
// they were made at, for Refund.
func (c *conf[S]) lease(d backend.Decision, st S, now, p int64) ratelimit.Lease {
	if !d.Granted {
		return (&c.infos).Lease(d, ratelimit.ReasonLimit, 0)
	}
	if p == 0 {
		return backend.Grant(&c.infos[0], d, 0)
	}
	if c.has(Refunds) {
		now = c.model.Made(st, now)
	}
	return backend.Grant(&c.infos[0], d, uint64(now))
}

// noRoom counts and makes the refusal of a new key while maxKeys keys are
// busy.
func (s *store[S]) noRoom() ratelimit.Lease {
	s.refused.Add(1)
	return (&noRoom).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonNoPartition, 0)
}

// admit counts a new key of sh, making room when maxKeys keys are live:
// an idle key of sh, or of another shard, is evicted. It reports false
// when none is found. Requires sh.mu.
func (s *store[S]) admit(sh *shard[S]) bool {
	for {
		n := s.live.Load()
		if n < s.maxKeys {
			if s.live.CompareAndSwap(n, n+1) {
				s.created.Add(1)
				return true
			}
			continue
		}
		if !s.makeRoom(sh) {
			return false
		}
	}
}

// idleState reports whether st, a state of the table under c, is initial,
// and since when: then its key can be dropped with no trace.
func idleState[S any](c *conf[S], st S, now int64) (time.Duration, bool) {
	at := c.model.InitialAt(st)
	switch {
	case at == math.MaxInt64 || now < at:
		return 0, false
	case at == math.MinInt64:
		return math.MaxInt64, true // initial since it was made, as far as is known
	}
	return time.Duration(now - at), true
}

// idleFor reports whether hd, a held limiter, is idle with no Wait in
// flight, and since when. Requires the shard's mu.
func (hd *held[S]) idleFor() (time.Duration, bool) {
	if hd.inflight != 0 {
		return 0, false
	}
	return hd.l.IdleFor()
}
