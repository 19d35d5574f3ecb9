package fixedwindow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
)

// 1,000 requests per hour, windows starting on the hour.
func ExampleConfig() {
	limiter, _ := memory.New(fixedwindow.Config{Limit: 1000, Window: time.Hour})
	lease, _ := limiter.Acquire(context.Background(), 1)
	fmt.Println(lease.Acquired(), lease.Remaining(), lease.ResetAfter() <= time.Hour)
	// Output: true 999 true
}
