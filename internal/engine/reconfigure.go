package engine

import (
	"context"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
)

// sync carries the state over to the current configuration, when
// Reconfigure replaced the one it is under, and reports whether it did;
// a waiter over the new capacity is refused. It does not serve the queue:
// a caller that does not serve it next calls syncServe. Requires l.mu.
func (l *limiter[S]) sync(now int64) bool {
	old := l.conf()
	c := old.cur.Load()
	if c == old {
		return false
	}
	l.flush(now) // under old: the new configuration may delay the bucket
	l.state = carry(old, c, l.state, now)
	l.c.Store(c)
	if l.x != nil {
		l.x.gen++ // behindQueue's cached answer was under the old one
	}
	// A waiter for more than the new capacity could never be served, and
	// would hold up the queue behind it: it is refused, and a reservation's
	// tokens come back.
	dropped := false
	for w := l.head; w != nil && c.capacity < old.capacity; {
		next := w.next
		if w.permits > c.capacity {
			l.remove(w, now)
			if c.has(Reserves) {
				l.state = c.model.Refund(l.state, now, now, w.permits)
				dropped = true
			}
			l.answer(w, l.refuse(backend.Decision{RetryAfter: -1}, w.permits, ratelimit.ReasonLimit))
		}
		w = next
	}
	switch {
	case dropped:
		l.redue(now)
	case c.has(Reserves):
		// The new configuration may repay the reservations sooner (a
		// higher rate): their due instants may move earlier, never later.
		l.gaveBack(now)
	}
	return true
}

// syncServe is sync, and then, when it carried the state over, the queue
// examined again at once, whichever call carried it (a Factory sibling's
// Stats, say): the timer may be set for a waiter just refused, or too late
// for the reservations behind it. For the calls that do not serve the
// queue themselves. Requires l.mu.
func (l *limiter[S]) syncServe(now int64) {
	if l.sync(now) && l.head != nil {
		l.serve(now)
	}
}

// carry is state s, under configuration old, carried over to c at now.
// A concurrency limit's holders keep their permits (s unchanged). A token
// bucket keeps the whole tokens it has at now, clamped to the new burst,
// or its debt. A window's permits in use at now (Used: its count, even
// above a limit) are taken at now from a new state of c: they stay in
// use, held against the new limit, and come back no sooner than they would
// have (with the window, or segment, in which now falls). Either way no
// more is available after the change than the old configuration had, or
// the new one allows. A token bucket of rate.Inf reads no state: the
// bucket is kept as it was, and the next configuration starts full, less
// the debt it still owes to reservations queued before (the kept state's
// refill mode may not be the next one's: only its debt is read).
func carry[S any](old, c *conf[S], s S, now int64) S {
	if c.has(Releases) || c.capacity == backend.Unlimited {
		return s
	}
	var used int64
	switch {
	case old.capacity == backend.Unlimited: // a full bucket, less the debt kept under rate.Inf
		if used = old.model.Used(s, now); used > 0 {
			used += c.capacity
		}
	case c.has(Reserves):
		// A token bucket keeps its tokens, clamped to the new burst (as
		// x/time/rate's SetBurst), and its debt (queued reservations).
		used = c.capacity - min(old.capacity-old.model.Used(s, now), c.capacity)
	default:
		used = old.model.Used(s, now)
	}
	if used <= 0 {
		return c.model.Initial()
	}
	return c.model.Holding(now, used)
}

// Reconfigure applies cfg, a config of the limiter's algorithm, from the
// next decision (see control.Reconfigure). A Factory's limiters share
// their configuration: reconfiguring one reconfigures all, each carrying
// its state over at its next call (this one at once). Queued waiters are
// examined again at once; a token bucket's reservations keep the instants
// they were given, or earlier ones when the new configuration repays their
// tokens sooner; a waiter for more permits than the new capacity is
// refused (ReasonLimit, RetryAfter unknown). Applying the config in force
// again changes nothing but carrying this limiter's state over to it.
func (l *limiter[S]) Reconfigure(cfg ratelimit.Config) error {
	c, err := makeConf(cfg, l.conf().newModel)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed // and the limiters that share its configuration keep it
	}
	if cur := l.conf().cur.Load(); cur.cfg != c.cfg { // the config in force changes nothing
		c.cur, c.clock = cur.cur, cur.clock
		c.cur.Store(c)
	}
	now := l.now()
	l.sync(now)
	if l.head != nil {
		l.serve(now)
	}
	return nil
}

// Reset puts the limiter back in its initial state (see
// control.Reset): a full bucket, empty windows, nothing held (the
// leases held before give nothing back when released); the queued waiters
// are examined again (a token bucket's reservations are taken again from
// the full bucket). ctx is not read: nothing here waits.
func (l *limiter[S]) Reset(ctx context.Context) error {
	if err := base.CheckContext(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	if l.conf().has(Releases) {
		l.ext().resets++ // the leases held now give nothing back
	}
	l.state = l.conf().model.Initial()
	if l.x != nil {
		l.x.gen++
	}
	if l.head == nil {
		return nil
	}
	if l.conf().has(Reserves) {
		for w := l.head; w != nil; w = w.next {
			if w.permits > 0 {
				l.state, _, _ = l.conf().model.Reserve(l.state, now, w.permits)
			}
		}
		l.redue(now)
	}
	l.serve(now)
	return nil
}
