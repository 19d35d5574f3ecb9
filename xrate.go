package ratelimit

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// FromRate wraps an existing *rate.Limiter as a Limiter, so code written
// against golang.org/x/time/rate can move to this interface one call site at
// a time. Acquire is AllowN at time.Now(); Wait reserves like WaitN, but
// refuses with a lease (ReasonDeadline, RetryAfter) instead of an error when
// ctx's deadline comes too soon, and returns ctx.Err() when ctx ends.
func FromRate(l *rate.Limiter) Limiter { return &xrate{l: l} }

type xrate struct {
	l      *rate.Limiter
	leases atomic.Pointer[Leases] // of the burst last seen: SetBurst may change it
}

func (x *xrate) check(permits int) error {
	if x.l.Limit() == rate.Inf && permits >= 0 {
		return nil
	}
	return CheckPermits(permits, int64(x.l.Burst()))
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

// lease makes the lease of d, with Leases made anew only when the burst
// has changed.
func (x *xrate) lease(d Decision, r Reason) Lease {
	burst := int64(x.l.Burst())
	ls := x.leases.Load()
	if ls == nil || ls[0].limit != burst {
		ls = new(Leases)
		*ls = MakeLeases(burst)
		x.leases.Store(ls)
	}
	return ls.Lease(d, r)
}

func seconds(s float64) time.Duration {
	if ns := math.Ceil(s * float64(time.Second)); ns < float64(math.MaxInt64) {
		return time.Duration(ns)
	}
	return time.Duration(math.MaxInt64)
}

func (x *xrate) Acquire(_ context.Context, permits int) (Lease, error) {
	if err := x.check(permits); err != nil {
		return Lease{}, err
	}
	now := time.Now()
	if permits > 0 && x.l.AllowN(now, permits) {
		return x.lease(x.decision(true, x.l.TokensAt(now)), ReasonNone), nil
	}
	tokens := x.l.TokensAt(now)
	if permits == 0 {
		return x.lease(x.decision(tokens >= 1, tokens), ReasonLimit), nil
	}
	d := x.decision(false, tokens)
	if r := float64(x.l.Limit()); r > 0 {
		d.RetryAfter = seconds((float64(permits) - tokens) / r)
	}
	return x.lease(d, ReasonLimit), nil
}

func (x *xrate) Wait(ctx context.Context, permits int) (Lease, error) {
	if err := x.check(permits); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	now := time.Now()
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
	if err := Sleep(ctx, SystemClock, delay); err != nil {
		r.Cancel()
		return Lease{}, err
	}
	return x.lease(x.decision(true, x.l.TokensAt(time.Now())), ReasonNone), nil
}

// SystemClock is the real clock: time.Now and time.AfterFunc.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

// Sleep waits d on clock (SystemClock when nil), or until ctx is done, when
// it returns ctx.Err().
func Sleep(ctx context.Context, clock Clock, d time.Duration) error {
	if clock == nil {
		clock = SystemClock
	}
	if d <= 0 {
		return nil
	}
	done := make(chan struct{})
	t := clock.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}
