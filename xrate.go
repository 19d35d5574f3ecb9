package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/leases"
)

// FromRate wraps an existing *rate.Limiter as a Limiter, so code written
// against golang.org/x/time/rate can move to this interface one call site at
// a time. Acquire is AllowN at time.Now(); Wait reserves like WaitN, but
// refuses with a lease (ReasonDeadline, RetryAfter) instead of an error when
// ctx's deadline comes too soon, and returns ctx.Err() when ctx ends.
//
// Like every limiter, it reports negative permits (ErrInvalidPermits),
// permits over the burst (ErrExceedsLimit, unless the limit is rate.Inf), a
// nil ctx (ErrNilContext) and a done one (ctx.Err()) before it takes
// anything. permits == 0 is a status check that takes nothing: Acquire
// grants it when at least one token is there (with the time until one is,
// when refused), and Wait waits until one is. A rate.Inf limit grants
// everything. A nil l makes every call return ErrInvalidConfig.
func FromRate(l *rate.Limiter) Limiter {
	x := &xrate{l: l}
	x.used.Store(time.Now().UnixNano())
	return x
}

type xrate struct {
	l     *rate.Limiter
	infos atomic.Pointer[leases.Infos] // of the burst last seen: SetBurst may change it
	used  atomic.Int64                 // UnixNano of the last call, for IdleFor
}

// IdleFor reports the wrapped limiter idle when its bucket is full (no
// reservation is outstanding then), for as long as it has not been called
// through this wrapper; calls made on the *rate.Limiter directly are not
// seen. A rate.Inf limit is always idle.
func (x *xrate) IdleFor() (time.Duration, bool) {
	if x.l == nil {
		return 0, false
	}
	now := time.Now()
	if x.l.Limit() != rate.Inf && x.l.TokensAt(now) < float64(x.l.Burst()) {
		return 0, false
	}
	return max(0, time.Duration(now.UnixNano()-x.used.Load())), true
}

// check reports what makes a call invalid, before anything is taken; for a
// valid call it reads the time the call is decided at, and records it for
// IdleFor.
func (x *xrate) check(ctx context.Context, permits int) (time.Time, error) {
	if x.l == nil {
		return time.Time{}, fmt.Errorf("%w: FromRate of a nil *rate.Limiter", ErrInvalidConfig)
	}
	capacity := int64(x.l.Burst())
	if x.l.Limit() == rate.Inf {
		capacity = leases.Unlimited
	}
	if err := base.CheckPermits(permits, capacity); err != nil {
		return time.Time{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	x.used.Store(now.UnixNano())
	return now, nil
}

// decision describes the bucket at now with tokens left after a decision.
func (x *xrate) decision(granted bool, tokens float64) Decision {
	burst, r := float64(x.l.Burst()), float64(x.l.Limit())
	d := Decision{Granted: granted, RetryAfter: -1, Remaining: int64(math.Max(0, math.Floor(tokens)))}
	if r > 0 && !math.IsInf(r, 1) && tokens < burst {
		d.ResetAfter = seconds((burst - tokens) / r)
	}
	return d
}

// until is how long until the bucket holds n tokens when it holds tokens
// now; negative when it never will (a zero limit).
func (x *xrate) until(n, tokens float64) time.Duration {
	if r := float64(x.l.Limit()); r > 0 {
		return seconds((n - tokens) / r)
	}
	return -1
}

// lease makes the lease of d, with Infos made anew only when the burst
// (or an infinite rate, which has no limit) has changed.
func (x *xrate) lease(d Decision, r Reason) Lease {
	limit := int64(x.l.Burst())
	if x.l.Limit() == rate.Inf {
		limit = -1
	}
	is := x.infos.Load()
	if is == nil || is[0].Limit() != limit {
		is = new(leases.Infos)
		*is = leases.MakeInfos(limit)
		is.SetGrows(leases.GrowsFunc(x.growsAfter))
		x.infos.Store(is)
	}
	return Lease(is.Make(d.Granted, uint8(r), d.Remaining, d.RetryAfter, d.ResetAfter, 0))
}

// growsAfter is a grant's time until the bucket's next whole token, at
// the limit in force: a token bucket's (see tokenbucket); unknown for
// rate.Inf or a limit of 0.
func (x *xrate) growsAfter(_ int64, resetAfter time.Duration, _ time.Time) (time.Duration, bool) {
	r := x.l.Limit()
	if r == rate.Inf || r <= 0 {
		return 0, false
	}
	return leases.NextToken(resetAfter, float64(time.Second)/float64(r)), true
}

// unlimited is the grant of a rate.Inf limit, which takes nothing: no
// limit, nothing remaining to count (-1, as Lease.Limit says).
func (x *xrate) unlimited() Lease {
	return x.lease(Decision{Granted: true, Remaining: -1}, ReasonNone)
}

func seconds(s float64) time.Duration {
	if ns := math.Ceil(s * float64(time.Second)); ns < float64(math.MaxInt64) {
		return time.Duration(ns)
	}
	return time.Duration(math.MaxInt64)
}

func (x *xrate) Acquire(ctx context.Context, permits int) (Lease, error) {
	now, err := x.check(ctx, permits)
	if err != nil {
		return Lease{}, err
	}
	if x.l.Limit() == rate.Inf {
		return x.unlimited(), nil
	}
	if permits > 0 && x.l.AllowN(now, permits) {
		return x.lease(x.decision(true, x.l.TokensAt(now)), ReasonNone), nil
	}
	tokens := x.l.TokensAt(now)
	d := x.decision(permits == 0 && tokens >= 1, tokens)
	if !d.Granted {
		d.RetryAfter = x.until(float64(max(permits, 1)), tokens)
	}
	return x.lease(d, ReasonLimit), nil
}

func (x *xrate) Wait(ctx context.Context, permits int) (Lease, error) {
	return x.WaitObserved(ctx, permits, nil)
}

// WaitObserved is Wait, telling o (when not nil) of the time the call sleeps
// for its reservation, or for a token (permits == 0), as ObservableWaiter says.
func (x *xrate) WaitObserved(ctx context.Context, permits int, o QueueObserver) (Lease, error) {
	now, err := x.check(ctx, permits)
	if err != nil {
		return Lease{}, err
	}
	if x.l.Limit() == rate.Inf {
		return x.unlimited(), nil
	}
	q := base.Queueing[Lease]{O: o, Ctx: ctx, Permits: permits}
	if permits == 0 {
		lease, err := x.waitStatus(ctx, &q)
		return q.Leave(time.Now, lease, err)
	}
	r := x.l.ReserveN(now, permits)
	if !r.OK() {
		return x.Acquire(ctx, permits)
	}
	delay := r.DelayFrom(now)
	if deadline, ok := ctx.Deadline(); ok && deadline.Sub(now) < delay {
		r.CancelAt(now)
		d := x.decision(false, x.l.TokensAt(now))
		d.RetryAfter = delay
		return x.lease(d, ReasonDeadline), nil
	}
	if delay > 0 {
		q.Join(time.Now)
	}
	if err := base.Sleep[Timer](ctx, nil, delay); err != nil {
		r.Cancel()
		return q.Leave(time.Now, Lease{}, err)
	}
	return q.Leave(time.Now, x.lease(x.decision(true, x.l.TokensAt(time.Now())), ReasonNone), nil)
}

// waitStatus is Wait(ctx, 0): it waits, reserving nothing, until the bucket
// holds a token, behind the reservations already made.
func (x *xrate) waitStatus(ctx context.Context, q *base.Queueing[Lease]) (Lease, error) {
	for {
		now := time.Now()
		tokens := x.l.TokensAt(now)
		if tokens >= 1 {
			return x.lease(x.decision(true, tokens), ReasonNone), nil
		}
		delay := x.until(1, tokens)
		if deadline, ok := ctx.Deadline(); ok && (delay < 0 || deadline.Sub(now) < delay) {
			d := x.decision(false, tokens)
			d.RetryAfter = delay
			return x.lease(d, ReasonDeadline), nil
		}
		q.Join(time.Now)
		if delay < 0 { // a zero limit: no token comes before ctx ends
			<-ctx.Done()
			return Lease{}, ctx.Err()
		}
		if err := base.Sleep[Timer](ctx, nil, delay); err != nil {
			return Lease{}, err
		}
	}
}
