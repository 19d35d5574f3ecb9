package tokenbucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// Interval refill: 5 tokens at the start of every minute, at most 10 saved up.
func ExampleConfig_interval() {
	limiter, _ := memory.New(tokenbucket.Config{Period: time.Minute, PerPeriod: 5, Burst: 10})
	lease, _ := limiter.Acquire(context.Background(), 10)
	fmt.Println(lease.Acquired(), lease.Remaining(), lease.Limit())
	// Output: true 0 10
}

// Continuous refill, as golang.org/x/time/rate: 100 per second, bursts of 20.
func ExampleConfig_continuous() {
	limiter, _ := memory.New(tokenbucket.Config{Rate: 100, Burst: 20})
	ctx := context.Background()
	limiter.Acquire(ctx, 20)
	lease, _ := limiter.Acquire(ctx, 5)
	retry, _ := lease.RetryAfter()
	fmt.Println(lease.Acquired(), retry.Round(10*time.Millisecond))
	// Output: false 50ms
}
