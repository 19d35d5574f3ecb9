package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/fixedwindow"
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
