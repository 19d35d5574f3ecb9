package slidinglog_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/slidinglog"
)

// Exactly 5 logins per 15 minutes, whatever the timing.
func ExampleConfig() {
	limiter, _ := memory.New(slidinglog.Config{Limit: 5, Window: 15 * time.Minute})
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		limiter.Acquire(ctx, 1)
	}
	lease, _ := limiter.Acquire(ctx, 1)
	retry, _ := lease.RetryAfter()
	fmt.Println(lease.Acquired(), retry.Round(time.Minute))
	// Output: false 15m0s
}
