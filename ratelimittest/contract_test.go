package ratelimittest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/waittrace"
)

// fault is a broken promise of a limiter, for checking that TestLimiter
// reports it.
type fault int

const (
	sound              fault = iota
	errorTakes               // a call with a done ctx takes its permits before failing
	zeroTakes                // Acquire(ctx, 0) takes a permit
	refusalTakes             // a refusal takes a permit (held until the limiter is drained)
	releaseTwice             // every Release of a lease gives its permits back
	cancelKeeps              // a cancelled Wait keeps the permits it asked for
	overGrants               // Acquire checks and takes in two steps: goroutines overtake each other
	shortRetryAfter          // a window's refusal reports half the wait
	releaseFreesWindow       // Release of a window's lease gives its permits back
	watchesAtOnce            // Wait tells its hooks of a Wait granted at once
	watchForgetsEnd          // Wait never tells its hooks Dequeued
)

// decision is the figures of a lease.
type decision struct {
	Remaining              int64
	RetryAfter, ResetAfter time.Duration
	Granted                bool
}

// newLease makes a lease whose Release calls rel (when not nil) with
// token: the faults below must be free to release twice.
func newLease(d decision, limit int64, rel interface{ Release(uint64) }, token uint64) ratelimit.Lease {
	o := &ratelimit.Outcome{Limit: limit, Reason: ratelimit.ReasonLimit}
	if d.Granted {
		o.Reason = ratelimit.ReasonNone
		if rel != nil {
			o.Releaser = rel
		}
	}
	return o.Lease(d.Remaining, d.RetryAfter, d.ResetAfter, token)
}

// faulty is a semaphore, like the Example's, that breaks the promise f.
type faulty struct {
	mu       sync.Mutex
	f        fault
	capacity int64
	held     int64
	next     uint64
	leases   map[uint64]int64
}

func (s *faulty) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, s.capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if s.f == errorTakes && ctx != nil && ctx.Err() != nil {
		s.mu.Lock()
		s.held += int64(permits)
		s.mu.Unlock()
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	p := int64(permits)
	if s.f == zeroTakes && p == 0 {
		p = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == overGrants {
		free := s.held+max(p, 1) <= s.capacity
		s.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		s.mu.Lock()
		if free {
			return s.grant(p), nil
		}
	} else if s.held+max(p, 1) <= s.capacity {
		return s.grant(p), nil
	}
	if s.f == refusalTakes {
		s.held++
	}
	d := decision{Remaining: max(s.capacity-s.held, 0), RetryAfter: -1}
	return newLease(d, s.capacity, nil, 0), nil
}

// grant takes p permits; s.mu is held.
func (s *faulty) grant(p int64) ratelimit.Lease {
	s.held += p
	s.next++
	s.leases[s.next] = p
	d := decision{Remaining: max(s.capacity-s.held, 0), Granted: true}
	return newLease(d, s.capacity, s, s.next)
}

func (s *faulty) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	for {
		lease, err := s.Acquire(ctx, permits)
		if err == nil && !lease.Acquired() {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(time.Millisecond):
				continue
			}
		}
		if s.f == cancelKeeps && ctx != nil && ctx.Err() != nil {
			s.mu.Lock()
			s.held += int64(permits)
			s.mu.Unlock()
		}
		return lease, err
	}
}

func (s *faulty) Release(token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held -= s.leases[token]
	if s.f != releaseTwice {
		delete(s.leases, token)
	}
}

// watched is faulty with a Wait that tells ctx's waittrace hooks and
// breaks the promise f.
type watched struct{ *faulty }

func newWatched(f fault) func(int64) ratelimit.Limiter {
	return func(c int64) ratelimit.Limiter {
		return watched{&faulty{f: f, capacity: c, leases: map[uint64]int64{}}}
	}
}

func (s watched) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	_, span := waittrace.Begin(ctx, permits)
	lease, err := s.Acquire(ctx, permits)
	if err != nil || lease.Acquired() {
		if s.f == watchesAtOnce {
			span.Join(time.Now())
			span.Done(time.Now(), lease.Acquired(), err)
		}
		return lease, err
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 10*time.Millisecond {
		lease, _ := s.Acquire(ctx, permits) // refused at once for its deadline
		if s.f == watchesAtOnce {
			span.Join(time.Now())
			span.Done(time.Now(), false, nil)
		}
		return lease, nil
	}
	span.Join(time.Now())
	lease, err = s.faulty.Wait(ctx, permits)
	if s.f != watchForgetsEnd {
		span.Done(time.Now(), lease.Acquired(), err)
	}
	return lease, err
}

// window is a fixed window limiter written outside limitkit: capacity
// permits per window of 100ms, windows counted from its creation; f may
// break one of its promises.
type window struct {
	mu       sync.Mutex
	f        fault
	start    time.Time
	capacity int64
	n        time.Duration // the current window's index
	used     int64
}

const windowSize = 100 * time.Millisecond

func (w *window) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, w.capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	since := time.Since(w.start)
	if n := since / windowSize; n != w.n {
		w.n, w.used = n, 0
	}
	end := (w.n+1)*windowSize - since
	p := int64(permits)
	if w.used+max(p, 1) > w.capacity {
		if w.f == shortRetryAfter {
			end /= 2
		}
		d := decision{Remaining: w.capacity - w.used, RetryAfter: end, ResetAfter: end}
		return newLease(d, w.capacity, nil, 0), nil
	}
	w.used += p
	d := decision{Remaining: w.capacity - w.used, ResetAfter: end, Granted: true}
	var rel interface{ Release(uint64) }
	if w.f == releaseFreesWindow {
		rel = windowRelease{w, p}
	}
	return newLease(d, w.capacity, rel, 0), nil
}

type windowRelease struct {
	w *window
	p int64
}

func (r windowRelease) Release(uint64) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.w.used = max(r.w.used-r.p, 0)
}

func (w *window) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	for {
		lease, err := w.Acquire(ctx, permits)
		if err != nil || lease.Acquired() {
			return lease, err
		}
		d, _ := lease.RetryAfter()
		select {
		case <-ctx.Done():
			return ratelimit.Lease{}, ctx.Err()
		case <-time.After(d):
		}
	}
}

func newFaulty(f fault) func(int64) ratelimit.Limiter {
	return func(c int64) ratelimit.Limiter {
		return &faulty{f: f, capacity: c, leases: map[uint64]int64{}}
	}
}

func newWindow(f fault) func(int64) ratelimit.Limiter {
	return func(c int64) ratelimit.Limiter {
		return &window{f: f, start: time.Now(), capacity: c}
	}
}

// TestLimiterOutsiders runs the kit against limiters written here, outside
// limitkit: a semaphore and a fixed window.
func TestLimiterOutsiders(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(int64) ratelimit.Limiter{
		"semaphore": newSemaphore, "faulty-sound": newFaulty(sound), "window": newWindow(sound),
		"watched-sound": newWatched(sound),
	} {
		f := f
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := ratelimittest.TestLimiter(f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLimiterCatches runs the kit against limiters that break one promise
// each: it must report the check of that promise (and may report others
// that the same fault breaks).
func TestLimiterCatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		new   func(int64) ratelimit.Limiter
		check string
	}{
		{"errorTakes", newFaulty(errorTakes), "ErrorsChangeNothing"},
		{"zeroTakes", newFaulty(zeroTakes), "ZeroPermitsTakeNothing"},
		{"refusalTakes", newFaulty(refusalTakes), "RefusalsTakeNothing"},
		{"releaseTwice", newFaulty(releaseTwice), "ReleaseIsIdempotent"},
		{"cancelKeeps", newFaulty(cancelKeeps), "CancelledWaitHoldsNothing"},
		{"overGrants", newFaulty(overGrants), "HeldWithinCapacity"},
		{"shortRetryAfter", newWindow(shortRetryAfter), "RetryAfterSuffices"},
		{"releaseFreesWindow", newWindow(releaseFreesWindow), "ReleaseIsIdempotent"},
		{"watchesAtOnce", newWatched(watchesAtOnce), "WaitTraceReports"},
		{"watchForgetsEnd", newWatched(watchForgetsEnd), "WaitTraceReports"},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := ratelimittest.TestLimiter(c.new)
			if err == nil {
				t.Fatalf("TestLimiter passed a limiter that breaks %s", c.check)
			}
			t.Logf("TestLimiter: %v", err)
			if !strings.Contains(err.Error(), c.check+":") {
				t.Errorf("TestLimiter did not report %s", c.check)
			}
		})
	}
}
