package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/tokenbucket"
	"github.com/limitkit/ratelimit/waittrace"
)

// A token bucket's Wait that Redis cannot answer waits in the fallback's
// queue: the waittrace hooks of its ctx are told of that queueing, once,
// with the time the fallback kept it (on the fake clock).
func TestWaitTracedInFallback(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 2, Burst: 1}
	fallback, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer fallback.Close()
	if lease, err := fallback.Acquire(ctx, 1); err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	mini, c := miniClient(t)
	l, err := redis.New(c, "observed", cfg, redis.WithFallback(fallback), redis.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mini.Close() // Redis is gone: the fallback answers
	var o ratelimittest.QueueLog
	done := make(chan ratelimit.Lease, 1)
	go func() { lease, _ := l.Wait(waittrace.WithHooks(ctx, o.Hooks()), 1); done <- lease }()
	waitTimers(t, clock, 1) // queued in the fallback, its timer armed
	clock.Advance(500 * time.Millisecond)
	if lease := <-done; !lease.Acquired() {
		t.Fatalf("the fallback's Wait: %v", lease)
	}
	if q, d := o.Told(); len(q) != 1 || len(d) != 1 || d[0].Queued != 500*time.Millisecond {
		t.Errorf("told Queued %d times, Dequeued %v; want once each, after 500ms", len(q), d)
	}
}
