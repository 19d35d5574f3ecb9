package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
)

// Wait queues a request until its window opens, up to the context deadline.
func ExampleNew() {
	limiter, err := memory.New(fixedwindow.Config{
		Limit:  100,
		Window: time.Hour,
		Queue:  ratelimit.Queue{Limit: 10}, // up to 10 permits may wait
	})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	lease, _ := limiter.Wait(ctx, 100) // all of this hour's permits
	fmt.Println(lease.Acquired())
	lease, _ = limiter.Wait(ctx, 1) // the next window is further than the deadline
	fmt.Println(lease.Acquired(), lease.Reason())
	fmt.Printf("%+v\n", limiter.Stats())
	// Output:
	// true
	// false deadline unreachable
	// {Available:0 Queued:0 Granted:1 Refused:1}
}

// A factory validates a config once and makes small limiters of it: here
// one per user, each with its own window.
func ExampleFactory() {
	perUser, err := memory.NewFactory(fixedwindow.Config{Limit: 1, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	alice, bob := perUser.New(), perUser.New()
	a1, _ := alice.Acquire(ctx, 1)
	a2, _ := alice.Acquire(ctx, 1)
	b1, _ := bob.Acquire(ctx, 1)
	fmt.Println(a1.Acquired(), a2.Acquired(), b1.Acquired())
	// Output:
	// true false true
}

// A limit of 2 per hour for each client IP: each key decides as a limiter
// of its own would, and is forgotten once idle.
func ExampleNewKeyed() {
	perIP, err := memory.NewKeyed(fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	defer perIP.Close()
	ctx := context.Background()
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		lease, _ := perIP.Acquire(ctx, ip, 1)
		fmt.Println(ip, lease.Acquired(), lease.Remaining())
	}
	fmt.Printf("%+v\n", perIP.Stats())
	// Output:
	// 192.0.2.1 true 1
	// 192.0.2.1 true 0
	// 192.0.2.1 false 0
	// 192.0.2.2 true 1
	// {Keys:2 Created:2 Evicted:0 Refused:0}
}
