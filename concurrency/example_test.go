package concurrency_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/memory"
)

// At most 2 jobs at once; a third waits for a Release.
func ExampleConfig() {
	limiter, _ := memory.New(concurrency.Config{Limit: 2, Queue: ratelimit.Queue{Limit: 1}})
	ctx := context.Background()
	first, _ := limiter.Acquire(ctx, 1)
	limiter.Acquire(ctx, 1)

	done := make(chan bool)
	go func() {
		lease, _ := limiter.Wait(ctx, 1) // queued until first is released
		done <- lease.Acquired()
		lease.Release()
	}()
	for limiter.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	first.Release()
	fmt.Println(<-done)
	// Output: true
}
