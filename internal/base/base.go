// Package base is what the root package ratelimit and the packages below it
// share: the error sentinels (ratelimit re-exports them, as os does io/fs's)
// and the checks every limiter makes before it changes any state.
package base

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The errors ratelimit exports, under the same names.
var (
	ErrInvalidPermits = errors.New("ratelimit: invalid permits")
	ErrExceedsLimit   = errors.New("ratelimit: permits exceed the limit")
	ErrInvalidConfig  = errors.New("ratelimit: invalid config")
	ErrClosed         = errors.New("ratelimit: limiter closed")
	ErrNilContext     = errors.New("ratelimit: nil context")
)

// CheckContext is what every limiter does with ctx before it changes any
// state: a nil ctx is ErrNilContext, a done one is ctx.Err(), unwrapped, so
// that errors.Is(err, context.Canceled) works.
func CheckContext(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	return ctx.Err()
}

// CheckPermits validates a request for permits against a capacity: negative
// permits wrap ErrInvalidPermits, more than capacity wraps ErrExceedsLimit.
func CheckPermits(permits int, capacity int64) error {
	if permits < 0 {
		return fmt.Errorf("%w: %d is negative", ErrInvalidPermits, permits)
	}
	if int64(permits) > capacity {
		return fmt.Errorf("%w: %d permits requested, capacity is %d", ErrExceedsLimit, permits, capacity)
	}
	return nil
}

// Sleep waits d on clock (a ratelimit.Clock; the system clock when nil), or
// until ctx is done, when it returns ctx.Err().
func Sleep[T interface{ Stop() bool }](ctx context.Context, clock interface {
	AfterFunc(time.Duration, func()) T
}, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	done := make(chan struct{})
	var stop func() bool
	if clock == nil {
		stop = time.AfterFunc(d, func() { close(done) }).Stop
	} else {
		stop = clock.AfterFunc(d, func() { close(done) }).Stop
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}

// Pause stores until, the end of a pause learnt from an upstream, under key
// in pauses (a map of string to time.Time), unless a later end is there
// already: a short pause learnt from one response never cuts a longer one
// learnt from another.
func Pause(pauses *sync.Map, key string, until time.Time) {
	for {
		old, loaded := pauses.LoadOrStore(key, until)
		if !loaded || !until.After(old.(time.Time)) {
			return
		}
		if pauses.CompareAndSwap(key, old, until) {
			return
		}
	}
}

// Queueing is one Wait's record of its time in the queue, for the observer
// of a ratelimit.ObservableWaiter (L is ratelimit.Lease): the call's first
// Join tells O it queued, Leave tells O its answer. A nil O is told nothing.
type Queueing[L any] struct {
	O interface {
		Queued(ctx context.Context, permits int)
		Dequeued(ctx context.Context, permits int, queued time.Duration, lease L, err error)
	}
	Ctx     context.Context
	Permits int
	queued  bool
	since   time.Time
}

// Join marks the start of a wait (a sleep armed, a member's queue joined),
// now being the clock's reading.
func (q *Queueing[L]) Join(now func() time.Time) {
	if q.O != nil && !q.queued {
		q.queued, q.since = true, now()
		q.O.Queued(q.Ctx, q.Permits)
	}
}

// Leave tells O the answer of a call that joined, and returns it.
func (q *Queueing[L]) Leave(now func() time.Time, lease L, err error) (L, error) {
	if q.queued {
		q.O.Dequeued(q.Ctx, q.Permits, max(now().Sub(q.since), 0), lease, err)
	}
	return lease, err
}

// WaitPause waits out the pause stored under key in pauses (see Pause), if
// it has not ended by clock's Now (the system clock when clock is nil),
// and then forgets it, unless a later one replaced it meanwhile. It does
// not wait when failFast is set or ctx's deadline comes before the pause
// ends: it returns refused, with the time left in wait. err is Sleep's.
func WaitPause[T interface{ Stop() bool }](ctx context.Context, clock interface {
	Now() time.Time
	AfterFunc(time.Duration, func()) T
}, pauses *sync.Map, key string, failFast bool) (wait time.Duration, refused bool, err error) {
	now := time.Now
	if clock != nil {
		now = clock.Now
	}
	until, ok := pauses.Load(key)
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
	pauses.CompareAndDelete(key, until)
	return wait, false, nil
}
