package engine

import (
	"context"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
)

// Acquire's and Wait's common case (nothing queued, the limiter open) is
// decided at once. Like x/time/rate, it reads the time before taking the
// lock, which keeps the critical section short under contention. Another
// goroutine may then decide at a later instant first; every model takes an
// instant older than its state's as that state's own (the token bucket
// refills nothing for it, windows count it in their newest segment or
// window, the sliding log records it at its newest entry), so it is never
// granted more than a moment later would be.
//
// The configuration is read before the lock too: a call that finds it
// replaced under the lock (Reconfigure) takes the slow path, which
// carries the state over to it first.
func (l *limiter[S]) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	c := l.conf()
	if permits < 0 || int64(permits) > c.capacity {
		if err := l.checkPermits(permits); err != nil {
			return ratelimit.Lease{}, err
		}
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	var now int64
	if !c.timeless {
		now = l.now()
	}
	l.mu.Lock()
	if l.closed || l.head != nil || c.cur.Load() != c {
		l.mu.Unlock()
		return l.acquireSlow(int64(permits))
	}
	lease := l.take(now, int64(permits))
	l.mu.Unlock()
	return lease, nil
}

// acquireSlow is Acquire on a closed limiter, a non-empty queue or a
// configuration just replaced.
func (l *limiter[S]) acquireSlow(p int64) (ratelimit.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	if p > l.conf().capacity { // the capacity may have shrunk
		return ratelimit.Lease{}, base.CheckPermits(int(p), l.conf().capacity)
	}
	if l.head != nil {
		l.serve(now)
		if l.behind(p) {
			return l.refuse(l.behindQueue(now, p), p, ratelimit.ReasonLimit), nil
		}
	}
	return l.take(now, p), nil
}

// behind reports whether a new request of p permits must wait behind the
// queue: a new request never overtakes a non-empty OldestFirst queue,
// except a status check (p == 0, which takes nothing) and, without a
// limit (rate.Inf, the waiters queued before it), any request: there is
// nothing to wait for. Requires l.mu.
func (l *limiter[S]) behind(p int64) bool {
	return l.head != nil && l.conf().queue.Order == ratelimit.OldestFirst && p > 0 && l.conf().capacity != backend.Unlimited
}

// take decides p permits now. Requires l.mu. It calls the model itself
// rather than through step, which the compiler does not inline here: a
// nanosecond of Acquire's 55 (BenchmarkTokenBucket in the bench module,
// against x/time/rate).
func (l *limiter[S]) take(now, p int64) ratelimit.Lease {
	var d backend.Decision
	l.state, d = l.conf().model.Step(l.state, now, p)
	return l.lease(d, now, p)
}

// step decides p permits now, counting nothing and making no lease. The
// state moves forward on a refusal too (segments that left the window),
// which must be kept. Requires l.mu.
func (l *limiter[S]) step(now, p int64) backend.Decision {
	var d backend.Decision
	l.state, d = l.conf().model.Step(l.state, now, p)
	return d
}

// lease counts a decision on p permits made at now and makes its lease: a
// grant's, whose token is the handle's generation for a releaser and the
// instant of the grant otherwise (Refund reads it), or a refusal's
// (ReasonLimit). A status check (p == 0) is not counted. Requires l.mu.
func (l *limiter[S]) lease(d backend.Decision, now, p int64) ratelimit.Lease {
	if !d.Granted {
		return l.refuse(d, p, ratelimit.ReasonLimit)
	}
	if p == 0 {
		return backend.Grant(&l.conf().infos[0], d, 0)
	}
	l.granted++
	if l.conf().has(Releases) {
		h := l.handle(p)
		return backend.Grant(&h.info, d, h.gen)
	}
	return backend.Grant(&l.conf().infos[0], d, uint64(l.made(now)))
}

// made is the instant the decision just made at now was made at, which a
// grant's lease carries for Refund. Requires l.mu.
func (l *limiter[S]) made(now int64) int64 {
	if !l.conf().has(Refunds) {
		return now
	}
	return l.conf().model.Made(l.state, now)
}

// refuse counts a refusal of p permits (a status check, p == 0, is not
// counted) and makes its lease. Requires l.mu.
func (l *limiter[S]) refuse(d backend.Decision, p int64, r ratelimit.Reason) ratelimit.Lease {
	d.Granted = false
	if p > 0 {
		l.refused++
	}
	return (&l.conf().infos).Lease(d, r, 0)
}

// handle returns a handle for a lease of p permits, reused from the free
// list when one is there. Requires l.mu.
func (l *limiter[S]) handle(p int64) *handle[S] {
	x := l.ext()
	h := x.free
	if h != nil && h.info.Limit != l.conf().capacity {
		x.free = nil // made under a replaced configuration: leases keep their figures
		h = nil
	}
	if h == nil {
		h = &handle[S]{owner: l}
		h.info = ratelimit.Outcome{Limit: l.conf().capacity, Releaser: h}
	} else {
		x.free, h.next = h.next, nil
	}
	h.permits, h.resets = p, x.resets
	return h
}

func (l *limiter[S]) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	c := l.conf() // whether it releases or refunds: the algorithm's, which no Reconfigure changes
	// A lease holds what it holds, whatever the capacity now: a release
	// checks no capacity.
	if permits < 0 || !c.has(Releases) && int64(permits) > c.capacity {
		if err := l.checkPermits(permits); err != nil {
			return err
		}
	}
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if l.isClosed() {
		return ratelimit.ErrClosed
	}
	if c.has(Releases) {
		if h, ok := releaser(lease).(*handle[S]); ok && h.owner == l {
			token, _ := (&h.info).Token(lease)
			l.giveBack(h, token, true)
		} else {
			lease.Release()
		}
		return nil
	}
	if !c.has(Refunds) || permits == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed
	}
	now := l.now()
	l.syncServe(now)
	// A grant made under a configuration since replaced is not recognised:
	// it is not given back (stricter, never looser).
	at, ok := (&l.conf().infos[0]).Token(lease)
	if !ok {
		return nil
	}
	l.state = l.conf().model.Refund(l.state, now, int64(at), int64(permits))
	if l.granted > 0 { // as if the request had not been made
		l.granted--
	}
	if l.x != nil {
		l.x.gen++
	}
	if l.head != nil {
		if l.conf().has(Reserves) {
			l.gaveBack(now)
		}
		l.serve(now)
	}
	return nil
}

// Backend is "memory".
func (l *limiter[S]) Backend() string { return "memory" }

func (l *limiter[S]) Stats() ratelimit.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.syncServe(now)
	return ratelimit.Stats{
		Available: max(0, l.conf().model.Available(l.state, now)),
		Queued:    l.queued(),
		Granted:   l.granted,
		Refused:   l.refused,
	}
}

// idleSinceUnknown marks a limiter whose permits all came back at an instant
// not read (to keep the clock off the Release path): the first IdleFor
// counts from its own call, a lower bound.
const idleSinceUnknown = math.MinInt64

func (l *limiter[S]) IdleFor() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head != nil {
		return 0, false
	}
	now := l.now()
	l.sync(now)
	if l.emptied == idleSinceUnknown {
		l.emptied = now
	}
	at := max(l.conf().model.InitialAt(l.state), l.emptied)
	if at == math.MaxInt64 || now < at {
		return 0, false
	}
	return time.Duration(now - at), true
}

func (l *limiter[S]) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.x != nil && l.x.stop != nil {
		l.x.stop()
	}
	now := l.now()
	for l.head != nil {
		w := l.head
		l.remove(w, now)
		l.answer(w, l.refuse(backend.Decision{RetryAfter: -1}, w.permits, ratelimit.ReasonClosed))
	}
	return nil
}

// giveBack returns the permits of the lease that holds h with token and
// recycles h, and for a refund counts its grant out of Granted; it does
// nothing when that lease was released already (h then has another
// generation). l.x exists: the lease's handle was made by lease.
func (l *limiter[S]) giveBack(h *handle[S], token uint64, refund bool) {
	l.mu.Lock()
	if h.gen != token {
		l.mu.Unlock()
		return
	}
	h.gen++
	if refund && l.granted > 0 {
		l.granted--
	}
	h.next, l.x.free = l.x.free, h
	l.x.gen++
	if l.closed || h.resets != l.x.resets { // closed, or forgotten by Reset
		l.mu.Unlock()
		return
	}
	var now int64
	if !l.conf().timeless || l.head != nil {
		now = l.now()
	}
	l.sync(now) // concurrency: the holders carry over as they are
	l.state = l.conf().model.Release(l.state, now, h.permits)
	if l.head != nil {
		l.serve(now)
	}
	if l.head == nil {
		// Perhaps nothing is held now: IdleFor reads the clock when asked
		// (a lower bound of the time since), where a release would read it
		// and ask the model every time.
		l.emptied = idleSinceUnknown
	}
	l.mu.Unlock()
}

// handle is the Releaser of a concurrency lease. Released handles go on the
// limiter's free list and are reused; gen tells the lease that owns a handle
// from older copies, which makes Release idempotent without an allocation
// per lease (memory's BenchmarkAcquire/concurrency: 0 allocs/op, the goal
// of every memory decision). gen, permits and next are guarded by the
// owner's mu, which Release takes anyway, so it costs no atomic operation
// of its own.
type handle[S any] struct {
	gen     uint64
	resets  uint64 // the owner's resets when it was handed out
	permits int64
	next    *handle[S]
	owner   *limiter[S]
	info    ratelimit.Outcome // of the leases that hold it
}

func (h *handle[S]) Release(token uint64) { h.owner.giveBack(h, token, false) }

// releaser is the Releaser of lease's Outcome; nil for the zero Lease.
func releaser(lease ratelimit.Lease) any {
	if o := lease.Outcome(); o != nil {
		return o.Releaser
	}
	return nil
}
