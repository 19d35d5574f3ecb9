package redis

import (
	"context"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/waittrace"
)

// Wait takes permits, waiting until ctx is done. The token bucket reserves in
// the script and sleeps once until its turn (a cancel refunds); the window
// algorithms sleep until RetryAfter plus a little jitter (at most a tenth
// of it, and at most 100ms) and try again;
// concurrency polls with backoff (1ms doubling to 50ms) until a holder
// releases. A ctx deadline that cannot be met is refused at once. Wait(ctx,
// 0) waits, the same way but never reserving and whatever the queue limit,
// until at least one permit is available, and takes nothing.
//
// The time a call spends queued, from its first sleep to its answer, is
// told to ctx's waittrace hooks; a call answered by its first round trip
// tells nothing.
func (l *Limiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, l.params().capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	ctx, span := waittrace.Begin(ctx, permits)
	lease, err := l.wait(ctx, permits, span)
	if span != nil { // no hooks: no clock to read
		span.Done(l.localNow(), lease.Acquired(), err)
	}
	return lease, err
}

// wait is Wait after its arguments were checked.
func (l *Limiter) wait(ctx context.Context, permits int, span *waittrace.Span) (ratelimit.Lease, error) {
	if l.reserves && !l.params().unlimited && permits > 0 {
		return l.reserve(ctx, int64(permits), span)
	}
	backoff := time.Millisecond
	for {
		lease, err := l.Acquire(ctx, permits)
		if err != nil || lease.Acquired() || lease.Reason() == ratelimit.ReasonUnavailable {
			return lease, err
		}
		if int64(permits) > check.QueueLimit(l.params().queue) {
			return l.refusedAs(lease, ratelimit.ReasonQueueFull), nil
		}
		d, known := lease.RetryAfter()
		d, ok := base.PollDelay(ctx, d, known, &backoff, l.until)
		if !ok {
			return l.refusedAs(lease, ratelimit.ReasonDeadline), nil
		}
		if lease, err := l.sleep(ctx, d, span); err != nil || lease.Reason() == ratelimit.ReasonClosed {
			return lease, err
		}
	}
}

// refusedAs is lease, a refusal of l or of its fallback, refused for r
// instead, with the figures of the limiter that refused: a fallback's
// refusal keeps the fallback's Limit (one allocation, while Redis fails).
func (l *Limiter) refusedAs(lease ratelimit.Lease, r ratelimit.Reason) ratelimit.Lease {
	d := backend.Decision{Remaining: lease.Remaining(), ResetAfter: lease.ResetAfter(), RetryAfter: -1}
	if ra, ok := lease.RetryAfter(); ok {
		d.RetryAfter = ra
	}
	if pm := l.params(); lease.Outcome() != &pm.infos[lease.Reason()] {
		return backend.Refusal(d, lease.Limit(), r)
	}
	return (&l.params().infos).Lease(d, r, 0)
}

// reserveCall makes the reserving call of p permits. A ctx that ends while
// the call is in flight returns at once, as any call does; the call goes
// on (bounded by the limiter's timeout) and what it took is given back
// when its answer comes: a reservation is cancelled, a grant refunded, so
// that a script run after its caller left holds nothing for nobody.
func (l *Limiter) reserveCall(ctx context.Context, p, maxWait int64) (reply, error) {
	if ctx.Done() == nil {
		return l.call(ctx, l.localNow(), opWait, p, maxWait)
	}
	type answer struct {
		r   reply
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := l.call(context.WithoutCancel(ctx), l.localNow(), opWait, p, maxWait)
		ch <- answer{r, err}
	}()
	select {
	case a := <-ch:
		return a.r, a.err
	case <-ctx.Done():
	}
	select {
	case a := <-ch: // answered meanwhile: the answer stands
		return a.r, a.err
	default:
	}
	go func() {
		a := <-ch
		if a.err != nil || !a.r.granted || a.r.at == 0 {
			return
		}
		bctx, cancel := l.bound(context.WithoutCancel(ctx))
		defer cancel()
		op, extra := opRefund, []interface{}{a.r.at}
		if a.r.retryAfter >= 0 { // a reservation
			op, extra = opCancel, []interface{}{a.r.at, a.r.prior}
		}
		if _, err := l.call(bctx, l.localNow(), op, p, extra...); err != nil {
			l.failed(err)
		}
		l.refusal.Store(nil)
	}()
	return reply{}, ctx.Err()
}

// reserve is the token bucket's Wait: one round trip takes the tokens (the
// bucket goes into debt), then one sleep until they have arrived. The
// reservation is due at the instant Acquire would grant them, and never
// before the reservations made earlier (the key's horizon): waiters are
// served in arrival order.
func (l *Limiter) reserve(ctx context.Context, p int64, span *waittrace.Span) (ratelimit.Lease, error) {
	if l.isClosed() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	maxWait := int64(-1) // in us, rounded down: a later due is refused
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = int64(max(l.until(deadline), 0) / time.Microsecond)
	}
	r, err := l.reserveCall(ctx, p, maxWait)
	if err != nil {
		return l.fail(ctx, err, func(f ratelimit.Limiter) (ratelimit.Lease, error) {
			return f.Wait(ctx, int(p)) // its queueing is told as this Wait's
		})
	}
	if err := l.exceeds(r, p); err != nil {
		return ratelimit.Lease{}, err
	}
	if !r.granted {
		switch r.refusal {
		case refusedQueueFull:
			return l.lease(r, p, 0, ratelimit.ReasonQueueFull), nil
		case refusedDeadline:
			return l.lease(r, p, 0, ratelimit.ReasonDeadline), nil
		}
		return l.lease(r, p, 0, ratelimit.ReasonLimit), nil
	}
	if r.retryAfter < 0 { // granted at once
		l.remember(time.Time{}, p, r, nil) // a grant: the remembered refusal is forgotten
		return l.lease(r, p, 0, ratelimit.ReasonNone), nil
	}
	lease, err := l.sleep(ctx, r.retryAfter, span)
	if err != nil || lease.Reason() == ratelimit.ReasonClosed {
		// Give the reserved tokens back; the caller's ctx may be done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(l.o.timeout, time.Second))
		if _, err := l.call(rctx, l.localNow(), opCancel, p, r.at, r.prior); err != nil {
			l.failed(err)
		}
		cancel()
		l.refusal.Store(nil) // the tokens came back
		return lease, err
	}
	r.retryAfter = -1
	l.remember(time.Time{}, p, r, nil) // a grant: the remembered refusal is forgotten
	return l.lease(r, p, 0, ratelimit.ReasonNone), nil
}

// sleep waits d on the limiter's clock; it returns ctx.Err() when ctx ends
// and a ReasonClosed refusal when the limiter is closed.
func (l *Limiter) sleep(ctx context.Context, d time.Duration, span *waittrace.Span) (ratelimit.Lease, error) {
	done := make(chan struct{})
	var stop func() bool
	if l.o.clock != nil {
		stop = l.o.clock.AfterFunc(d, func() { close(done) })
	} else {
		stop = time.AfterFunc(d, func() { close(done) }).Stop
	}
	defer stop()
	if d > 0 {
		span.Join(l.localNow()) // once the timer is armed
	}
	select {
	case <-done:
		return ratelimit.Lease{}, nil
	case <-ctx.Done():
		return ratelimit.Lease{}, ctx.Err()
	case <-l.ext().closed:
		return (&l.params().infos).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonClosed, 0), nil
	}
}

func (l *Limiter) until(deadline time.Time) time.Duration {
	if l.o.clock != nil {
		return deadline.Sub(l.o.clock.Now())
	}
	return time.Until(deadline)
}
