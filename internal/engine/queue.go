package engine

import (
	"context"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/waittrace"
)

// Wait takes permits, queueing when they are not available now. Wait(ctx,
// 0) waits until at least one permit is available and takes nothing; it
// queues (behind the waiters already there) whatever the queue limit,
// since it holds no permits.
// The time a call spends in the queue is told to ctx's waittrace hooks.
func (l *limiter[S]) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	c := l.conf()
	if permits < 0 || int64(permits) > c.capacity {
		if err := l.checkPermits(permits); err != nil {
			return ratelimit.Lease{}, err
		}
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	var now int64 // read before the lock, as in Acquire
	if !c.timeless {
		now = l.now()
	}
	l.mu.Lock()
	if !l.closed && l.head == nil && c.cur.Load() == c {
		if d := l.step(now, int64(permits)); d.Granted {
			lease := l.lease(d, now, int64(permits))
			l.mu.Unlock()
			return lease, nil
		}
	}
	l.mu.Unlock()
	return l.waitSlow(ctx, permits)
}

// waitSlow is Wait once permits are not granted at once: it queues, or
// answers at once (a refusal, a grant after a Reconfigure), and tells its
// queueing to ctx's waittrace hooks. A keyed store calls it for a key whose
// state it has just moved into l.
func (l *limiter[S]) waitSlow(ctx context.Context, permits int) (ratelimit.Lease, error) {
	w, lease, err := l.enqueue(ctx, int64(permits))
	if w == nil {
		return lease, err
	}
	ctx, span := waittrace.Begin(ctx, permits)
	span.Join(time.Unix(0, w.at))
	lease, err = l.await(ctx, w)
	if span != nil {
		span.Done(time.Unix(0, l.now()), lease.Acquired(), err)
	}
	return lease, err
}

// await waits for the answer of w, a queued waiter, until ctx is done; a
// waiter cancelled leaves the queue, and what it reserved comes back.
func (l *limiter[S]) await(ctx context.Context, w *waiter) (ratelimit.Lease, error) {
	select {
	case lease := <-w.ch:
		return lease, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if !w.queued { // answered in the meantime: the answer stands
		l.mu.Unlock()
		return <-w.ch, nil
	}
	now := l.now()
	l.sync(now)
	if !w.queued { // refused by the new configuration
		if l.head != nil {
			l.serve(now) // the others, under it
		}
		l.mu.Unlock()
		return <-w.ch, nil
	}
	l.remove(w, now)
	if l.conf().has(Reserves) && w.permits > 0 {
		l.state = l.conf().model.Refund(l.state, now, now, w.permits)
		l.gaveBack(now)
	}
	l.serve(now) // the waiters behind it may fit now
	l.mu.Unlock()
	return ratelimit.Lease{}, ctx.Err()
}

// enqueue answers at once (w == nil) or queues a waiter.
func (l *limiter[S]) enqueue(ctx context.Context, p int64) (w *waiter, lease ratelimit.Lease, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, lease, ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	if p > l.conf().capacity { // the capacity may have shrunk
		return nil, lease, base.CheckPermits(int(p), l.conf().capacity)
	}
	l.serve(now)
	var d backend.Decision
	if !l.behind(p) {
		if d = l.step(now, p); d.Granted {
			return nil, l.lease(d, now, p), nil
		}
	}
	// A status check (p == 0) queues whatever the limit: it holds no
	// permit, and makes no waiter go (the queue may be over a limit
	// lowered since).
	limit := check.QueueLimit(l.conf().queue)
	full := p > 0 && (p > limit || (l.conf().queue.Order == ratelimit.OldestFirst && l.queued()+p > limit))
	_, deadlined := ctx.Deadline()
	// Behind the queue, a refusal's figures are worked out only where they
	// may be told: a full queue, a deadline that may come first, or a
	// reservation that may be refused (a token bucket's, in one step).
	if l.head != nil && l.conf().queue.Order == ratelimit.OldestFirst && (full || deadlined || l.conf().has(Reserves) || replayAll) {
		d = l.behindQueue(now, p)
	}
	if full {
		return nil, l.refuse(d, p, ratelimit.ReasonQueueFull), nil
	}
	// NewestFirst: the oldest waiters, up to last, must go to make room.
	var last *waiter
	for e, room := l.head, l.queued()+p-limit; p > 0 && room > 0; e = e.next {
		room -= e.permits
		last = e
	}
	state := l.state
	w = &waiter{permits: p, at: now, ch: make(chan ratelimit.Lease, 1)}
	if l.conf().has(Reserves) {
		for e := l.head; last != nil && e != last.next; e = e.next {
			state = l.conf().model.Refund(state, now, now, e.permits)
		}
		if p == 0 {
			w.due = l.conf().model.When(state, now, 1)
		} else {
			var ok bool
			if state, w.due, ok = l.conf().model.Reserve(state, now, p); !ok {
				return nil, l.refuse(d, p, ratelimit.ReasonQueueFull), nil
			}
		}
		d.RetryAfter = time.Duration(w.due - now)
	}
	if deadline, ok := ctx.Deadline(); ok && d.RetryAfter >= 0 && l.until(deadline) < d.RetryAfter {
		return nil, l.refuse(d, p, ratelimit.ReasonDeadline), nil
	}
	evicted := last != nil
	for last != nil {
		e := l.head
		l.remove(e, now)
		l.answer(e, l.refuse(d, e.permits, ratelimit.ReasonEvicted))
		if e == last {
			break
		}
	}
	l.state = state
	l.push(w)
	if l.conf().has(Reserves) && evicted {
		l.gaveBack(now) // the evicted reservations' tokens came back
	}
	l.serve(now)
	return w, lease, nil
}

// redue moves every reservation's due instant forward after tokens came
// back: each is due when the bucket has repaid all but the permits
// reserved behind it. A due instant only moves earlier, so the instant a
// waiter was told still holds. Requires l.mu and a reserver.
func (l *limiter[S]) redue(now int64) {
	var owed int64 // permits reserved behind w
	for w := l.x.tail; w != nil; w = w.prev {
		l.moveDue(w, now, owed)
		owed += w.permits
	}
	l.x.stale = false
}

// moveDue moves w's due instant forward to when the bucket has repaid all
// but owed, the permits reserved behind w. Requires l.mu and a reserver.
func (l *limiter[S]) moveDue(w *waiter, now, owed int64) {
	need := -owed
	if w.permits == 0 {
		need++ // a status check waits for one token beyond them
	}
	w.due = min(w.due, l.conf().model.When(l.state, now, need))
}

// gaveBack notes that tokens came back to a reserver with waiters (a
// cancel, an eviction, a refund, a settlement for less): their due
// instants may move earlier. Only the head's is read (serve), so each is
// moved when its waiter reaches the head, in one step; redue moving them
// all at every cancel made a mass cancel of n waiters take n² steps under
// the lock (BenchmarkCancelQueued). The instants come out the same
// (TestLazyDueMatchesEager), but for the rounding of the bucket's float
// arithmetic at the instant they are worked out: under a nanosecond for
// instants less than months ahead. Later give-backs only move a due
// instant earlier; waiters joining behind reserve as many tokens as they
// add to what is owed; a change that could delay the bucket (a charge, a
// reconfiguration) flushes first; a reset moves them all. A grant that
// takes tokens past the queue (newest first) fits only once every
// reservation is due, and serve, which runs first, has served them.
// Requires l.mu and a reserver.
func (l *limiter[S]) gaveBack(now int64) {
	switch {
	case l.head == nil:
	case eagerDue:
		l.redue(now)
	default:
		l.x.stale = true
	}
}

// eagerDue makes gaveBack move every due instant at once, as redue alone
// did: the reference TestLazyDueMatchesEager compares with.
var eagerDue bool

// flush moves every due instant that gaveBack left behind, before a change
// that could delay the bucket. Requires l.mu.
func (l *limiter[S]) flush(now int64) {
	if l.x != nil && l.x.stale {
		l.redue(now)
	}
}

// behindQueue is the refusal of p permits that would wait behind the whole
// queue: its RetryAfter is when the queued permits and then p could all be
// had, each waiter served in order as soon as it can be. It changes no
// state but dropping what left the window. Requires l.mu, and that the
// queue's first waiter cannot be served now.
func (l *limiter[S]) behindQueue(now, p int64) backend.Decision {
	m := l.conf().model
	var d backend.Decision
	l.state, d = m.Step(l.state, now, 0) // the figures of now
	d.Granted = false
	if l.conf().has(Reserves) { // the state holds the queue's reservations
		d.RetryAfter = time.Duration(l.conf().model.When(l.state, now, max(p, 1)) - now)
		return d
	}
	// The answer holds until the queue or what it waits for changes: a
	// flood of refusals behind an unchanged queue reuses it, rather than
	// copying a log and replaying the queue on every one.
	x := l.x
	if x.behind.gen != int64(x.gen) || x.behind.p != p {
		x.behind = behind{gen: int64(x.gen), p: p, at: l.replayQueue(now, p)}
	}
	d.RetryAfter = -1
	if x.behind.at >= 0 {
		d.RetryAfter = time.Duration(max(x.behind.at-now, 0))
	}
	return d
}

// replayQueue serves the queue, then p permits, on a copy of the state,
// each as soon as it can be, and returns the instant p is served; -1 when
// unknown (permits that come back on Release). The queue's part is kept
// for its generation (x.end), and a waiter that joins extends it (push),
// so n calls with deadlines joining one after another are replayed in n
// steps, not n². Any other change of the queue (a waiter served,
// cancelled, refused) replays it whole at the next call that needs it.
// Requires l.mu.
func (l *limiter[S]) replayQueue(now, p int64) int64 {
	x := l.x
	if replayAll || !x.end.valid || x.end.gen != x.gen {
		st := l.state
		if l.conf().has(Clones) {
			st = l.conf().model.Clone(st)
		}
		x.end = replayEnd[S]{gen: x.gen, valid: true, st: st, t: now}
		for w := l.head; w != nil && x.end.stop == 0; w = w.next {
			l.replayOne(&x.end, w.permits)
		}
	}
	switch end := x.end; {
	case end.stop < 0:
		return -1
	case end.stop > 0:
		return end.t
	default:
		if l.conf().has(Clones) {
			end.st = l.conf().model.Clone(end.st)
		}
		l.replayOne(&end, p)
		if end.stop < 0 {
			return -1
		}
		return end.t
	}
}

// replayEnd is the queue of generation gen replayed: the state and instant
// after its last waiter was served (stop 0), or where the replay stopped:
// at a waiter whose permits come back on Release (stop -1), or one not
// granted after three tries (stop 1, at t).
type replayEnd[S any] struct {
	gen   uint64
	valid bool
	st    S
	t     int64
	stop  int
}

// replayOne serves want permits on e, as soon as they can be. Requires
// l.mu.
func (l *limiter[S]) replayOne(e *replayEnd[S], want int64) {
	m := l.conf().model
	// Each waiter is granted once RetryAfter has passed: RetryAfter is
	// exact, so the second try succeeds (the third is a safeguard).
	for try := 0; try < 3; try++ {
		var g backend.Decision
		if e.st, g = m.Step(e.st, e.t, want); g.Granted {
			return
		} else if g.RetryAfter < 0 {
			e.stop = -1
			return
		}
		e.t += int64(g.RetryAfter)
	}
	e.stop = 1
}

// replayAll makes enqueue work out every refusal's figures behind the
// queue, and replayQueue replay the whole queue each time, as they did
// before the replay was kept: the reference TestQueueReplayKept compares
// with.
var replayAll bool

// serve grants queued waiters, in queue order, while they fit, and sets the
// timer for the first one that does not. Requires l.mu.
func (l *limiter[S]) serve(now int64) {
	for l.head != nil {
		w := l.head
		if l.conf().queue.Order == ratelimit.NewestFirst && !l.conf().has(Reserves) {
			w = l.x.tail
		}
		var d backend.Decision
		if l.conf().has(Reserves) {
			if l.x.stale {
				l.moveDue(w, now, l.x.queued-w.permits)
			}
			if w.due > now {
				l.arm(now, w.due)
				return
			}
			_, d = l.conf().model.Step(l.state, now, 0) // the figures after the reservation
			d.Granted = true
			if w.permits > 0 { // the reservation took its tokens; count it
				l.granted++
				l.remove(w, now)
				l.answer(w, backend.Grant(&l.conf().infos[0], d, uint64(l.made(now))))
				continue
			}
		} else {
			var st S
			st, d = l.conf().model.Step(l.state, now, w.permits)
			l.state = st
			if !d.Granted {
				if d.RetryAfter >= 0 {
					l.arm(now, now+int64(d.RetryAfter))
				}
				return
			}
		}
		l.remove(w, now)
		l.answer(w, l.lease(d, now, w.permits))
	}
}

// arm sets the limiter's one timer to fire at instant at. Requires l.mu.
func (l *limiter[S]) arm(now, at int64) {
	if l.x.timerAt == at {
		return
	}
	l.x.timerAt = at
	d := time.Duration(at - now)
	if l.x.stop != nil {
		l.x.stop()
	}
	if l.conf().clock == nil {
		l.x.stop = time.AfterFunc(d, l.fire).Stop
	} else {
		l.x.stop = l.conf().clock.AfterFunc(d, l.fire)
	}
}

func (l *limiter[S]) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.x.timerAt = 0
	if !l.closed {
		now := l.now()
		l.sync(now)
		l.serve(now)
	}
}

// push appends w at the queue's newest end. Requires l.mu.
func (l *limiter[S]) push(w *waiter) {
	l.ext()
	w.prev, w.queued = l.x.tail, true
	if l.x.tail == nil {
		l.head = w
	} else {
		l.x.tail.next = w
	}
	l.x.tail = w
	l.x.queued += w.permits
	end := &l.x.end
	extend := end.valid && end.gen == l.x.gen
	l.x.gen++
	if extend {
		if end.stop == 0 {
			l.replayOne(end, w.permits)
		}
		end.gen = l.x.gen
	}
}

// remove unlinks w from the queue. Requires l.mu.
func (l *limiter[S]) remove(w *waiter, now int64) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.x.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	l.x.queued -= w.permits
	l.x.gen++
	if l.head == nil {
		l.emptied = now
		l.x.stale = false // no due instant is left behind
		l.x.end = replayEnd[S]{}
		if l.x.timerAt != 0 { // nobody left to serve: the timer goes
			l.x.stop()
			l.x.timerAt = 0
		}
	}
}

// isClosed reports whether Close was called.
func (l *limiter[S]) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// answer hands a waiter its lease; ch is buffered, so this never blocks.
func (l *limiter[S]) answer(w *waiter, lease ratelimit.Lease) { w.ch <- lease }
