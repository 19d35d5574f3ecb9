package ratelimittest_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// semaphore is a limiter written outside limitkit: at most capacity
// permits held at once, each lease giving its permits back on its first
// Release.
type semaphore struct {
	mu       sync.Mutex
	capacity int64
	held     int64
}

func newSemaphore(capacity int64) ratelimit.Limiter {
	return &semaphore{capacity: capacity}
}

func (s *semaphore) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if permits < 0 {
		return ratelimit.Lease{}, fmt.Errorf("%w: %d", ratelimit.ErrInvalidPermits, permits)
	}
	if int64(permits) > s.capacity {
		return ratelimit.Lease{}, fmt.Errorf("%w: %d of %d", ratelimit.ErrExceedsLimit, permits, s.capacity)
	}
	if ctx == nil {
		return ratelimit.Lease{}, ratelimit.ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := int64(permits)
	// A status check (permits == 0) is granted when a permit is free.
	if s.held+max(p, 1) > s.capacity {
		// RetryAfter unknown (negative): the permits come back on Release.
		refused := ratelimit.Outcome{Limit: s.capacity, Reason: ratelimit.ReasonLimit}
		return refused.Lease(s.capacity-s.held, -1, 0, 0), nil
	}
	s.held += p
	// Each grant has an Outcome of its own, whose Releaser gives its
	// permits back once, however often the lease is released.
	g := &grant{s: s, p: p}
	g.o = ratelimit.Outcome{Limit: s.capacity, Releaser: g}
	return g.o.Lease(s.capacity-s.held, 0, 0, 0), nil
}

// grant is one grant of a semaphore.
type grant struct {
	s    *semaphore
	p    int64
	once sync.Once
	o    ratelimit.Outcome
}

func (g *grant) Release(uint64) {
	g.once.Do(func() {
		g.s.mu.Lock()
		defer g.s.mu.Unlock()
		g.s.held -= g.p
	})
}

// Wait polls Acquire every millisecond until it is granted or ctx is done.
func (s *semaphore) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	for {
		lease, err := s.Acquire(ctx, permits)
		if err != nil || lease.Acquired() {
			return lease, err
		}
		select {
		case <-ctx.Done():
			return ratelimit.Lease{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// The kit runs against any limiter, here one written in a test file: in a
// test, fail with the error that TestLimiter returns.
func ExampleTestLimiter() {
	if err := ratelimittest.TestLimiter(newSemaphore); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the semaphore keeps the contract")
	// Output: the semaphore keeps the contract
}
