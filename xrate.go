package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit/waittrace"
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
	l        *rate.Limiter
	outcomes atomic.Pointer[[len(reasonNames)]Outcome] // of the burst last seen: SetBurst may change it
	used     atomic.Int64                              // UnixNano of the last call, for IdleFor
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
	if permits < 0 {
		return time.Time{}, fmt.Errorf("%w: %d is negative", ErrInvalidPermits, permits)
	}
	if burst := x.l.Burst(); x.l.Limit() != rate.Inf && permits > burst {
		return time.Time{}, fmt.Errorf("%w: %d permits requested, capacity is %d", ErrExceedsLimit, permits, burst)
	}
	if ctx == nil {
		return time.Time{}, ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	x.used.Store(now.UnixNano())
	return now, nil
}

// decision is the figures of a lease.
type decision struct {
	granted                bool
	remaining              int64
	retryAfter, resetAfter time.Duration
}

// decision describes the bucket at now with tokens left after a decision.
func (x *xrate) decision(granted bool, tokens float64) decision {
	burst, r := float64(x.l.Burst()), float64(x.l.Limit())
	d := decision{granted: granted, retryAfter: -1, remaining: int64(math.Max(0, math.Floor(tokens)))}
	if r > 0 && !math.IsInf(r, 1) && tokens < burst {
		d.resetAfter = seconds((burst - tokens) / r)
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

// lease makes the lease of d, with Outcomes made anew only when the burst
// (or an infinite rate, which has no limit) has changed.
func (x *xrate) lease(d decision, r Reason) Lease {
	limit := int64(x.l.Burst())
	if x.l.Limit() == rate.Inf {
		limit = -1
	}
	os := x.outcomes.Load()
	if os == nil || os[0].Limit != limit {
		os = new([len(reasonNames)]Outcome)
		for r := range os {
			os[r] = Outcome{Limit: limit, Reason: Reason(r)}
		}
		os[0].Grows = x
		x.outcomes.Store(os)
	}
	if d.granted {
		return os[0].Lease(d.remaining, 0, d.resetAfter, 0)
	}
	return os[r].Lease(d.remaining, d.retryAfter, d.resetAfter, 0)
}

// GrowsAfter is a grant's time until the bucket's next whole token, at
// the limit in force: a token bucket's, resetAfter modulo the time a token
// takes (that time for a full bucket), rounded up to the nanosecond, as
// tokenbucket says; unknown for rate.Inf or a limit of 0.
func (x *xrate) GrowsAfter(_ int64, resetAfter time.Duration, _ time.Time) (time.Duration, bool) {
	r := x.l.Limit()
	if r == rate.Inf || r <= 0 {
		return 0, false
	}
	perToken := float64(time.Second) / float64(r)
	ns := perToken
	if resetAfter > 0 {
		if m := math.Mod(float64(resetAfter), perToken); m > 0 {
			ns = m
		}
	}
	return time.Duration(math.Ceil(ns)), true
}

// unlimited is the grant of a rate.Inf limit, which takes nothing: no
// limit, nothing remaining to count (-1, as Lease.Limit says).
func (x *xrate) unlimited() Lease {
	return x.lease(decision{granted: true, remaining: -1}, ReasonNone)
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
	if !d.granted {
		d.retryAfter = x.until(float64(max(permits, 1)), tokens)
	}
	return x.lease(d, ReasonLimit), nil
}

// Wait reserves, and sleeps until the reservation is due; the sleep (or,
// for permits == 0, the wait for a token) is told to ctx's waittrace hooks.
func (x *xrate) Wait(ctx context.Context, permits int) (lease Lease, err error) {
	now, err := x.check(ctx, permits)
	if err != nil {
		return Lease{}, err
	}
	if x.l.Limit() == rate.Inf {
		return x.unlimited(), nil
	}
	ctx, span := waittrace.Begin(ctx, permits)
	if span != nil { // no hooks: no clock to read
		defer func() { span.Done(time.Now(), lease.Acquired(), err) }()
	}
	if permits == 0 {
		return x.waitStatus(ctx, span)
	}
	r := x.l.ReserveN(now, permits)
	if !r.OK() {
		return x.Acquire(ctx, permits)
	}
	delay := r.DelayFrom(now)
	if deadline, ok := ctx.Deadline(); ok && deadline.Sub(now) < delay {
		r.CancelAt(now)
		d := x.decision(false, x.l.TokensAt(now))
		d.retryAfter = delay
		return x.lease(d, ReasonDeadline), nil
	}
	if delay > 0 {
		span.Join(time.Now())
	}
	if err := sleep(ctx, delay); err != nil {
		r.Cancel()
		return Lease{}, err
	}
	return x.lease(x.decision(true, x.l.TokensAt(time.Now())), ReasonNone), nil
}

// sleep waits d, or until ctx is done, when it returns ctx.Err().
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitStatus is Wait(ctx, 0): it waits, reserving nothing, until the bucket
// holds a token, behind the reservations already made.
func (x *xrate) waitStatus(ctx context.Context, span *waittrace.Span) (Lease, error) {
	for {
		now := time.Now()
		tokens := x.l.TokensAt(now)
		if tokens >= 1 {
			return x.lease(x.decision(true, tokens), ReasonNone), nil
		}
		delay := x.until(1, tokens)
		if deadline, ok := ctx.Deadline(); ok && (delay < 0 || deadline.Sub(now) < delay) {
			d := x.decision(false, tokens)
			d.retryAfter = delay
			return x.lease(d, ReasonDeadline), nil
		}
		span.Join(now)
		if delay < 0 { // a zero limit: no token comes before ctx ends
			<-ctx.Done()
			return Lease{}, ctx.Err()
		}
		if err := sleep(ctx, delay); err != nil {
			return Lease{}, err
		}
	}
}
