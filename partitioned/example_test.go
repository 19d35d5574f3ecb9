package partitioned_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
)

// One limit of 2 per hour for each client IP; the office network is exempt.
func ExampleNew() {
	perIP, err := partitioned.New(partitioned.Config{
		New: func(ip string) (ratelimit.Limiter, error) {
			if ip == "10.0.0.1" {
				return partitioned.NoLimit(), nil
			}
			return memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour})
		},
	})
	if err != nil {
		panic(err)
	}
	defer perIP.Close()
	ctx := context.Background()
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "10.0.0.1", "10.0.0.1", "10.0.0.1"} {
		lease, _ := perIP.Acquire(ctx, ip, 1)
		fmt.Println(ip, lease.Acquired())
	}
	fmt.Printf("%+v\n", perIP.Stats())
	// Output:
	// 192.0.2.1 true
	// 192.0.2.1 true
	// 192.0.2.1 false
	// 192.0.2.2 true
	// 10.0.0.1 true
	// 10.0.0.1 true
	// 10.0.0.1 true
	// {Live:3 Created:3 Evicted:0 Refused:0}
}
