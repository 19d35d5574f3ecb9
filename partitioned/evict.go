package partitioned

import (
	"io"
	"math/rand/v2"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

// closeError is the error of closing the limiter of a partition's key.
type closeError struct {
	key string
	err error
}

// discard closes lim, key's limiter that no partition holds, and reports
// its error with the errors of closed.
func (l *Limiter) discard(key string, lim ratelimit.Limiter, closed []closeError) {
	if err := closeLimiter(lim); err != nil {
		closed = append(closed, closeError{key, err})
	}
	l.report(closed)
}

// report hands the errors of closing evicted or discarded limiters to
// Config.OnCloseError. It must be called with no lock held.
func (l *Limiter) report(closed []closeError) {
	if f := l.cfg.OnCloseError; f != nil {
		for _, c := range closed {
			f(c.key, c.err)
		}
	}
}

// makeRoom evicts one idle partition to make room for a new one in s: one
// of s's, or else one of another shard whose lock is free (waiting for it
// while holding s's could deadlock with a call doing the same the other way).
// The error of closing the evicted limiter is added to closed. Requires s.mu.
func (l *Limiter) makeRoom(s *shard, closed *[]closeError) bool {
	if l.evictOne(s, closed) {
		return true
	}
	start := rand.IntN(shards)
	for k := range shards {
		o := &l.shards[(start+k)%shards]
		if o == s || !o.mu.TryLock() {
			continue
		}
		ok := l.evictOne(o, closed)
		o.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// evictOne evicts one idle partition of s, looking at a few at most from a
// random slot on, adding the error of closing its limiter to closed.
// Requires s.mu.
func (l *Limiter) evictOne(s *shard, closed *[]closeError) bool {
	mask := len(s.slots) - 1
	seen, start := 0, rand.IntN(len(s.slots))
	for k := range s.slots {
		i := (start + k) & mask
		if s.slots[i] == 0 {
			continue
		}
		if _, idle := l.idle(s, i); idle {
			l.evict(s, i, closed)
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
func (l *Limiter) idle(s *shard, i int) (time.Duration, bool) {
	p := l.store.at(uint32(s.slots[i]) - 1)
	if p.inflight.Load() != 0 {
		return 0, false
	}
	il, _ := control.As[Idler](p.limiter) // create admits Idlers only
	return il.IdleFor()
}

// evict removes the partition in slot i, closes its limiter and frees its
// place; the error of closing is added to closed. Requires s.mu.
func (l *Limiter) evict(s *shard, i int, closed *[]closeError) {
	id := uint32(s.slots[i]) - 1
	s.remove(i)
	l.live.Add(-1)
	l.stats.evicted.Add(1)
	p := l.store.at(id)
	if err := closeLimiter(p.limiter); err != nil {
		*closed = append(*closed, closeError{p.key, err})
	}
	p.key, p.limiter = "", nil
	l.store.release(id)
}

// closeLimiter closes lim if it is an io.Closer.
func closeLimiter(lim ratelimit.Limiter) error {
	if c, ok := lim.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// sweep evicts every partition idle for IdleTimeout, then re-arms itself.
// The errors of closing the evicted limiters go to Config.OnCloseError,
// shard by shard, once the shard's lock is released.
func (l *Limiter) sweep() {
	var closed []closeError
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
				l.evict(s, j, &closed)
			}
		}
		s.mu.Unlock()
		l.report(closed)
		closed = closed[:0]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed.Load() {
		l.stop = l.afterFunc(l.sweepEvery(), l.sweep)
	}
}
