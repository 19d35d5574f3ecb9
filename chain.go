package ratelimit

import (
	"context"
	"fmt"
)

// ChainLimiter is the Limiter returned by Chain.
type ChainLimiter struct {
	limiters []Limiter
	clock    Clock
}

// Chain returns one limiter that takes permits from each of limiters in
// order, all or nothing: a per-user limit and a global one, say.
//
// Acquire asks each limiter in turn; on a refusal it releases what it took,
// in reverse order, and returns the refusing lease, so its RetryAfter and
// reason reach the caller. Releasing gives concurrency permits back; a rate
// limiter's permits, once granted, stay spent, so put the limiter most likely
// to refuse first. The granted lease's Release releases every limiter's lease;
// its figures are those of the limiter with the fewest permits remaining.
//
// Wait never holds permits of one limiter while it sleeps on another: it
// tries the whole chain, and on a refusal releases everything, sleeps until
// the refusing limiter's RetryAfter (or, for a concurrency limiter, waits on
// it alone and releases at once), then tries again, until ctx is done.
func Chain(limiters ...Limiter) *ChainLimiter {
	return &ChainLimiter{limiters: limiters, clock: SystemClock}
}

// WithClock makes Wait sleep on c; for tests.
func (c *ChainLimiter) WithClock(clock Clock) *ChainLimiter {
	return &ChainLimiter{limiters: c.limiters, clock: clock}
}

// Acquire takes permits from every limiter now, or from none.
func (c *ChainLimiter) Acquire(ctx context.Context, permits int) (Lease, error) {
	lease, _, err := c.acquire(ctx, permits)
	return lease, err
}

// acquire returns the chain's lease, or the refusing lease and its limiter.
func (c *ChainLimiter) acquire(ctx context.Context, permits int) (Lease, Limiter, error) {
	if len(c.limiters) == 0 {
		return Lease{}, nil, fmt.Errorf("%w: empty chain", ErrInvalidConfig)
	}
	taken := make(chained, 0, len(c.limiters))
	for _, l := range c.limiters {
		lease, err := l.Acquire(ctx, permits)
		if err != nil || !lease.Acquired() {
			taken.release()
			return lease, l, err
		}
		taken = append(taken, lease)
	}
	best := taken[0]
	for _, l := range taken[1:] {
		if l.Remaining() < best.Remaining() {
			best = l
		}
	}
	d := Decision{Granted: true, Remaining: best.Remaining()}
	for _, l := range taken {
		d.ResetAfter = max(d.ResetAfter, l.ResetAfter())
	}
	return NewLease(d, best.Limit(), ReasonNone, &taken, 0), nil, nil
}

// Wait takes permits from every limiter, sleeping while any refuses.
func (c *ChainLimiter) Wait(ctx context.Context, permits int) (Lease, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Lease{}, err
		}
		lease, refuser, err := c.acquire(ctx, permits)
		if err != nil || lease.Acquired() {
			return lease, err
		}
		d, known := lease.RetryAfter()
		if !known { // permits come back on Release: wait for them in that limiter's queue
			held, err := refuser.Wait(ctx, permits)
			if err != nil || !held.Acquired() {
				return held, err
			}
			held.Release()
			continue
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(c.clock.Now()) < d {
			return NewLease(Decision{Remaining: lease.Remaining(), RetryAfter: d, ResetAfter: lease.ResetAfter()}, lease.Limit(), ReasonDeadline, nil, 0), nil
		}
		if err := Sleep(ctx, c.clock, d); err != nil {
			return Lease{}, err
		}
	}
}

// chained releases its leases in reverse order; each is idempotent.
type chained []Lease

func (c *chained) release() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i].Release()
	}
}

func (c *chained) Release(uint64) { c.release() }
