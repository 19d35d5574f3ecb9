package hotkey

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/redis"
)

// A refill is the one script call in flight for a limiter: it decides
// its caller's permits and takes a new lease; the requests that find the
// lease empty meanwhile wait for it, then try the new lease.
type refill struct {
	done chan struct{} // closed once answered
	// The answer, to be read once done is closed.
	r   reply
	err error
}

// refusal is a refusal from Redis, remembered: the process refuses
// locally until until.
type refusal struct {
	until, retryAt, resetAt time.Time
	remaining               int64
}

// failedOpen is the Infos of FailOpen's grants, made with no limit applied.
var failedOpen = backend.MakeOutcomes(-1)

// slow serves a request the lease seen (nil: none) could not: from the
// remembered refusal, by waiting for the refill in flight, or by making
// one. again reports that the request is to be tried anew on the lease
// now installed.
func (l *Limiter) slow(ctx context.Context, p int64, seen *batch) (lease ratelimit.Lease, err error, again bool) {
	l.mu.Lock()
	if l.cur.Load() != seen {
		l.mu.Unlock()
		return ratelimit.Lease{}, nil, true
	}
	now := l.now()
	l.used.Store(now.UnixNano())
	if r := l.refused; r != nil && now.Before(r.until) {
		l.mu.Unlock()
		d := backend.Decision{Remaining: r.remaining, RetryAfter: max(r.retryAt.Sub(now), 0), ResetAfter: max(r.resetAt.Sub(now), 0)}
		return (&l.infos).Lease(d, ratelimit.ReasonLimit, 0), nil, false
	}
	if l.closed.Load() {
		l.mu.Unlock()
		return ratelimit.Lease{}, ratelimit.ErrClosed, false
	}
	if f := l.flight; f != nil {
		l.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return ratelimit.Lease{}, ctx.Err(), false
		}
		if f.err != nil {
			lease, err := l.fail(ctx, p, f.err)
			return lease, err, false
		}
		return ratelimit.Lease{}, nil, true
	}
	f := &refill{done: make(chan struct{})}
	l.flight = f
	op, want := opTake, p
	if p == 0 {
		op = opPeek
	} else {
		want = l.want(p, now)
	}
	var g giveBack
	if seen != nil {
		if seen.stopTimer != nil {
			seen.stopTimer()
		}
		if u := seen.stop(); seen.h > 0 {
			g = giveBack{id: seen.id, h: seen.h, e: seen.e, u: u}
		}
	}
	l.cur.Store(nil)
	l.mu.Unlock()
	go l.refill(f, op, p, want, g)
	select {
	case <-f.done:
	case <-ctx.Done():
		// Whatever the call decides stands: a grant's permits are lost,
		// as with a call to Redis whose caller left.
		return ratelimit.Lease{}, ctx.Err(), false
	}
	if f.err != nil {
		lease, err := l.fail(ctx, p, f.err)
		return lease, err, false
	}
	r := f.r
	if !r.granted {
		d := backend.Decision{Remaining: r.remaining, RetryAfter: r.retryAfter, ResetAfter: r.resetAfter}
		return (&l.infos).Lease(d, ratelimit.ReasonLimit, 0), nil, false
	}
	// The caller's permits were decided by the script, at its instant.
	d := backend.Decision{Granted: true, Remaining: r.k - p + r.remaining, ResetAfter: r.resetAfter}
	return (&l.infos).Lease(d, ratelimit.ReasonNone, 0), nil, false
}

// want is the permits to ask for a request of p at the local now: p, and
// what the process's recent demand spends in half an expiry (an eighth
// for a sliding log), within what the live leases may hold. Requires
// l.mu.
func (l *Limiter) want(p int64, now time.Time) int64 {
	asked := l.asked.Load()
	if el := now.Sub(l.lastAt); !l.lastAt.IsZero() && el > 0 {
		seen := float64(asked-l.asked0) / el.Seconds()
		if l.rate == 0 {
			l.rate = seen
		} else {
			l.rate = (l.rate + seen) / 2
		}
	}
	l.lastAt, l.asked0 = now, asked
	more := math.Ceil(l.rate * l.target.Seconds())
	if !(more < float64(l.maxHeld)) { // NaN, +Inf and large values alike
		more = float64(l.maxHeld)
	}
	return p + int64(more)
}

// refill makes f's call (giving g back), installs its lease and answers f.
func (l *Limiter) refill(f *refill, op string, p, want int64, g giveBack) {
	id := l.idBase + "." + strconv.FormatUint(l.seq.Add(1), 36)
	sent := l.now() // before the call leaves: the local deadline falls before Redis's expiry
	r, err := l.call(op, p, want, id, g, sent)
	if err != nil {
		l.failed(err)
	}
	var nb *batch
	var back giveBack
	l.mu.Lock()
	switch {
	case err != nil:
	case !r.granted:
		until := sent.Add(min(max(r.retryAfter, 0), l.expiry))
		l.refused = &refusal{until: until, retryAt: sent.Add(max(r.retryAfter, 0)), resetAt: sent.Add(r.resetAfter), remaining: r.remaining}
	default:
		l.refused = nil
		if h := r.k - p; h > 0 && r.valid > 0 {
			nb = &batch{id: id, h: h, e: r.e, shared: r.remaining, resetAt: sent.Add(r.resetAfter),
				deadline: sent.Add(r.valid - r.valid/1024)} // a margin for the rates of two clocks
			nb.left.Store(h)
			if l.closed.Load() || !l.now().Before(nb.deadline) {
				back = giveBack{id: id, h: h, e: r.e, u: nb.stop()}
				l.gives.Add(1)
			} else {
				l.cur.Store(nb)
				l.arm(nb, sent, 1, 0)
			}
		}
	}
	f.r, f.err = r, err
	l.flight = nil
	l.mu.Unlock()
	close(f.done)
	if back.id != "" {
		l.give(back)
		l.gives.Done()
	}
}

// The checks of a lease, at quarters of its expiry from its call: at the
// first its permits left are noted; at the second, a lease that nothing
// was spent from since is given back (the process is idle); at the third,
// what is left is given back (at the expiry it would be lost).

// arm sets b's timer for its check number step (1 to 3); noted is what
// the check before saw left. Requires l.mu.
func (l *Limiter) arm(b *batch, sent time.Time, step int, noted int64) {
	d := max(sent.Add(time.Duration(step)*l.expiry/4).Sub(l.now()), 0)
	f := func() { l.check(b, sent, step, noted) }
	if l.o.clock != nil {
		b.stopTimer = l.o.clock.AfterFunc(d, f)
	} else {
		b.stopTimer = time.AfterFunc(d, f).Stop
	}
}

// check is b's check number step.
func (l *Limiter) check(b *batch, sent time.Time, step int, noted int64) {
	l.mu.Lock()
	if l.cur.Load() != b {
		l.mu.Unlock()
		return
	}
	if v := b.left.Load(); step == 1 || (step == 2 && v != noted) {
		l.arm(b, sent, step+1, v)
		l.mu.Unlock()
		return
	}
	l.cur.Store(nil)
	u := b.stop()
	l.gives.Add(1)
	l.mu.Unlock()
	l.give(giveBack{id: b.id, h: b.h, e: b.e, u: u})
	l.gives.Done()
}

// giveBack gives b's unspent permits back (b is no longer spent), and
// returns the call's error wrapping redis.ErrUnavailable.
func (l *Limiter) giveBack(b *batch) error {
	u := b.stop()
	if u == 0 {
		return nil
	}
	if _, err := l.call(opGive, 0, 0, "", giveBack{id: b.id, h: b.h, e: b.e, u: u}, l.now()); err != nil {
		l.failed(err)
		return fmt.Errorf("%w: %w", redis.ErrUnavailable, err)
	}
	return nil
}

// give gives g back, on the caller's goroutine (a timer's, a refill's);
// a failure loses the permits until the lease's expiry.
func (l *Limiter) give(g giveBack) {
	if g.u == 0 {
		return
	}
	if _, err := l.call(opGive, 0, 0, "", g, l.now()); err != nil {
		l.failed(err)
	}
}

// failed tells WithOnFailure's function of a failed call.
func (l *Limiter) failed(err error) {
	if l.o.onFailure != nil {
		l.o.onFailure(err)
	}
}

// fail applies the failure policy to a request of p permits that needed
// Redis, which failed with err.
func (l *Limiter) fail(ctx context.Context, p int64, err error) (ratelimit.Lease, error) {
	if ctx.Err() != nil {
		return ratelimit.Lease{}, ctx.Err()
	}
	if l.o.fallback != nil {
		return l.o.fallback.Acquire(ctx, int(p))
	}
	switch l.o.policy {
	case redis.FailOpen:
		return (&failedOpen).Lease(backend.Decision{Granted: true, Remaining: -1, RetryAfter: -1}, ratelimit.ReasonNone, 0), nil
	case redis.FailClosed:
		return (&l.infos).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonUnavailable, 0), nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("timeout %v: %w", l.o.timeout, err)
	}
	return ratelimit.Lease{}, fmt.Errorf("%w: %w", redis.ErrUnavailable, err)
}
