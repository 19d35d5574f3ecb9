package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/redis"
)

// The same config as memory.New, shared by every process that uses the key.
// (miniredis stands in for a Redis server here.)
func ExampleNew() {
	server, _ := miniredis.Run()
	defer server.Close()
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer client.Close()

	limiter, err := redis.New(client, "api:checkout", fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		lease, err := limiter.Acquire(ctx, 1)
		if err != nil {
			panic(err) // Redis could not decide: see WithFailurePolicy
		}
		fmt.Println(lease.Acquired(), lease.Remaining())
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// One limit per client IP, kept in Redis: a Factory holds what every key's
// limiter shares, and partitioned keeps a small handle per key.
func ExampleFactory() {
	server, _ := miniredis.Run()
	defer server.Close()
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	perIP, err := redis.NewFactory(client, fixedwindow.Config{Limit: 1, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	limiter, err := partitioned.New(partitioned.Config{
		New: perIP.ForKey,
	})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		lease, err := limiter.Acquire(ctx, ip, 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(ip, lease.Acquired())
	}
	// Output:
	// 192.0.2.1 true
	// 192.0.2.1 false
	// 192.0.2.2 true
}
