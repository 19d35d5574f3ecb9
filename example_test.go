package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// Limit work in one process with a token bucket: a burst of 3, then 1 per second.
func Example() {
	limiter, err := memory.New(tokenbucket.Config{Rate: 1, Burst: 3})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		lease, err := limiter.Acquire(ctx, 1)
		if err != nil {
			panic(err)
		}
		if lease.Acquired() {
			fmt.Printf("request %d: granted, %d left\n", i, lease.Remaining())
			continue
		}
		retry, _ := lease.RetryAfter()
		fmt.Printf("request %d: %v, retry in %v\n", i, lease.Reason(), retry.Round(time.Second))
	}
	// Output:
	// request 1: granted, 2 left
	// request 2: granted, 1 left
	// request 3: granted, 0 left
	// request 4: limit reached, retry in 1s
}

// A per-user limit and a global one, taken together or not at all.
func ExampleChain() {
	perUser, _ := memory.New(concurrency.Config{Limit: 2})
	global, _ := memory.New(concurrency.Config{Limit: 3})
	both := ratelimit.Chain(perUser, global)

	ctx := context.Background()
	a, _ := both.Acquire(ctx, 2)
	b, _ := both.Acquire(ctx, 1) // perUser is full: global keeps its permit
	fmt.Println(a.Acquired(), b.Acquired(), global.Stats().Available)
	a.Release()
	fmt.Println(perUser.Stats().Available, global.Stats().Available)
	// Output:
	// true false 1
	// 2 3
}

// Code written for golang.org/x/time/rate moves to the interface unchanged.
func ExampleFromRate() {
	limiter := ratelimit.FromRate(rate.NewLimiter(10, 1))
	lease, _ := limiter.Wait(context.Background(), 1)
	fmt.Println(lease.Acquired(), lease.Limit())
	// Output: true 1
}

// quota is a limiter of one's own: n permits in all, never renewed.
type quota struct {
	mu          sync.Mutex
	limit, left int64
}

func (q *quota) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if permits < 0 || int64(permits) > q.limit {
		return ratelimit.Lease{}, fmt.Errorf("%w: %d of %d", ratelimit.ErrInvalidPermits, permits, q.limit)
	}
	if ctx == nil {
		return ratelimit.Lease{}, ratelimit.ErrNilContext
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if p := int64(permits); q.left >= max(p, 1) {
		q.left -= p
		granted := ratelimit.Outcome{Limit: q.limit}
		return granted.Lease(q.left, 0, 0, 0), nil
	}
	// RetryAfter unknown (negative): a quota does not come back.
	refused := ratelimit.Outcome{Limit: q.limit, Reason: ratelimit.ReasonLimit}
	return refused.Lease(q.left, -1, 0, 0), nil
}

func (q *quota) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return q.Acquire(ctx, permits)
}

// A limiter of one's own makes its leases with an Outcome.
func ExampleOutcome() {
	var limiter ratelimit.Limiter = &quota{limit: 2, left: 2}
	for i := 0; i < 3; i++ {
		lease, _ := limiter.Acquire(context.Background(), 1)
		fmt.Println(lease)
	}
	// Output:
	// granted (remaining 1 of 2)
	// granted (remaining 0 of 2)
	// refused: limit reached
}
