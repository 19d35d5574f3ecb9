// Package base is what the module's limiters share: the checks every
// limiter makes before it changes any state (the root package's Chain and
// FromRate make the same, in the same order), and sleeping on a clock.
package base

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
)

// CheckContext is what every limiter does with ctx before it changes any
// state: a nil ctx is ErrNilContext, a done one is ctx.Err(), unwrapped, so
// that errors.Is(err, context.Canceled) works.
func CheckContext(ctx context.Context) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	return ctx.Err()
}

// CheckPermits validates a request for permits against a capacity: negative
// permits wrap ratelimit.ErrInvalidPermits, more than capacity wraps ErrExceedsLimit.
func CheckPermits(permits int, capacity int64) error {
	if permits < 0 {
		return fmt.Errorf("%w: %d is negative", ratelimit.ErrInvalidPermits, permits)
	}
	if int64(permits) > capacity {
		return fmt.Errorf("%w: %d permits requested, capacity is %d", ratelimit.ErrExceedsLimit, permits, capacity)
	}
	return nil
}

// Sleep waits d on clock (the system clock when nil), or until ctx is
// done, when it returns ctx.Err().
func Sleep(ctx context.Context, clock ratelimit.Clock, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	done := make(chan struct{})
	var stop func() bool
	if clock == nil {
		stop = time.AfterFunc(d, func() { close(done) }).Stop
	} else {
		stop = clock.AfterFunc(d, func() { close(done) })
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}

// Now reads clock, the system clock when nil.
func Now(clock ratelimit.Clock) time.Time {
	if clock == nil {
		return time.Now()
	}
	return clock.Now()
}

// DefaultMaxPause is the longest pause one upstream's answer can set, unless
// a client says otherwise (httplimit.Transport.MaxPause,
// grpclimit.Client.MaxPause): 366 days, the longest wait of a calendar
// quota (a year's), so that a wrong or hostile answer (Retry-After in the
// year 9999) cannot stall the calls that have no deadline for centuries.
const DefaultMaxPause = 366 * 24 * time.Hour

// MaxPause is max, or DefaultMaxPause when max is not positive.
func MaxPause(max time.Duration) time.Duration {
	if max <= 0 {
		return DefaultMaxPause
	}
	return max
}

// Pauses are the pauses a client learnt from its upstreams: per key, no
// request before an instant. The zero value is empty and ready; safe for
// concurrent use. A pause is forgotten by the first request of its key
// after it ends, and every sweepEvery-th pause learnt forgets every pause
// ended by then, so that the keys never asked again do not pile up.
type Pauses struct {
	m      sync.Map // key -> time.Time
	learnt atomic.Uint64
}

// sweepEvery is how many pauses are learnt between two sweeps of the
// ended ones: a sweep reads every pause, and so costs each pause learnt
// at most the live ones over sweepEvery.
const sweepEvery = 256

// Pause stores until, the end of a pause learnt at now, under key, unless
// a later end is there already: a short pause learnt from one response
// never cuts a longer one learnt from another.
func (p *Pauses) Pause(key string, until, now time.Time) {
	for {
		old, loaded := p.m.LoadOrStore(key, until)
		if !loaded || !until.After(old.(time.Time)) || p.m.CompareAndSwap(key, old, until) {
			break
		}
	}
	if p.learnt.Add(1)%sweepEvery == 0 {
		p.m.Range(func(k, v any) bool {
			if !v.(time.Time).After(now) {
				p.m.CompareAndDelete(k, v)
			}
			return true
		})
	}
}

// Wait waits out the pause stored under key (see Pause), if it has not
// ended by clock's Now (the system clock when clock is nil), and then
// forgets it, unless a later one replaced it meanwhile. It does not wait
// when failFast is set or ctx's deadline comes before the pause ends: it
// returns refused, with the time left in wait. err is Sleep's.
func (p *Pauses) Wait(ctx context.Context, clock ratelimit.Clock, key string, failFast bool) (wait time.Duration, refused bool, err error) {
	now := func() time.Time { return Now(clock) }
	until, ok := p.m.Load(key)
	if !ok {
		return 0, false, nil
	}
	if wait = until.(time.Time).Sub(now()); wait > 0 {
		if deadline, has := ctx.Deadline(); failFast || (has && deadline.Sub(now()) < wait) {
			return wait, true, nil
		}
		if err := Sleep(ctx, clock, wait); err != nil {
			return wait, false, err
		}
	}
	p.m.CompareAndDelete(key, until)
	return wait, false, nil
}

// MaxJitter bounds the delay a polling Wait (redis's window algorithms,
// hotkey's) adds at random to a RetryAfter before asking again: a tenth of
// a daily quota's RetryAfter would be hours.
const MaxJitter = 100 * time.Millisecond

// Jitter is the random delay a polling Wait adds to a refusal's RetryAfter
// d, so that the processes waiting for one window do not all ask again at
// its first instant: in [0, min(d/10, MaxJitter)], and, when ctx has a
// deadline (left before it, left >= d), at most half of left - d, so that
// the retry comes before a deadline it can meet.
func Jitter(d, left time.Duration, deadline bool) time.Duration {
	j := time.Duration(rand.Int64N(int64(min(d/10, MaxJitter)) + 1))
	if deadline {
		j = min(j, max(left-d, 0)/2)
	}
	return j
}

// MaxBackoff bounds the delay of a polling Wait whose refusal gave no
// RetryAfter (see PollDelay).
const MaxBackoff = 50 * time.Millisecond

// PollDelay is how long a polling Wait (redis's window algorithms,
// hotkey's) sleeps after a refusal before it asks again: a known
// RetryAfter d and its Jitter; else *backoff, which doubles for the next
// time up to MaxBackoff. It never passes ctx's deadline, whose time left
// until reads on the Wait's clock. ok is false when that deadline comes
// before a known d: the Wait cannot be met.
func PollDelay(ctx context.Context, d time.Duration, known bool, backoff *time.Duration, until func(deadline time.Time) time.Duration) (wait time.Duration, ok bool) {
	deadline, has := ctx.Deadline()
	var left time.Duration
	if has {
		left = until(deadline)
	}
	if known {
		if has && left < d {
			return 0, false
		}
		d += Jitter(d, left, has)
	} else {
		d, *backoff = *backoff, min(2**backoff, MaxBackoff)
	}
	if has {
		d = min(d, max(left, 0))
	}
	return d, true
}
