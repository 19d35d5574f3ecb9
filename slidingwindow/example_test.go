package slidingwindow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/slidingwindow"
)

// 60 per minute over a window that slides in 6 steps of 10s.
func ExampleConfig_segmented() {
	limiter, _ := memory.New(slidingwindow.Config{Limit: 60, Window: time.Minute, Segments: 6})
	lease, _ := limiter.Acquire(context.Background(), 60)
	fmt.Println(lease.Acquired(), lease.Remaining())
	// Output: true 0
}

// 60 per minute with the two-window weighted counter: 24 bytes per key.
func ExampleConfig_weighted() {
	limiter, _ := memory.New(slidingwindow.Config{Limit: 60, Window: time.Minute})
	_, err := limiter.Acquire(context.Background(), 61)
	fmt.Println(err)
	lease, _ := limiter.Acquire(context.Background(), 60)
	fmt.Println(lease.Acquired())
	// Output:
	// ratelimit: permits exceed the limit: 61 permits requested, capacity is 60
	// true
}
