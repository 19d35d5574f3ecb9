package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
	"github.com/limitkit/ratelimit/waittrace"
)

// TestContract runs the kit's contract checks, the ones any limiter must
// pass, against FromRate and against Chains (of a rate limit and a
// concurrency limit, so that a Chain's Wait both sleeps and queues).
func TestContract(t *testing.T) {
	mustMemory := func(cfg ratelimit.Config) memory.Limiter {
		l, err := memory.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for name, newLimiter := range map[string]func(c int64) ratelimit.Limiter{
		"FromRate": func(c int64) ratelimit.Limiter {
			return ratelimit.FromRate(rate.NewLimiter(rate.Every(time.Second/time.Duration(c)), int(c)))
		},
		"Chain/rate-first": func(c int64) ratelimit.Limiter {
			return ratelimit.Chain(mustMemory(tokenbucket.Config{Rate: rate.Limit(c), Burst: int(c)}),
				mustMemory(tokenbucket.Config{Rate: rate.Limit(2 * c), Burst: int(2 * c)}))
		},
		"Chain/concurrency-last": func(c int64) ratelimit.Limiter {
			return ratelimit.Chain(mustMemory(tokenbucket.Config{Rate: rate.Limit(100 * c), Burst: int(100 * c)}),
				mustMemory(concurrency.Config{Limit: int(c)}))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := ratelimittest.TestLimiter(newLimiter); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Chain waits in a member's queue as the member does: when the member
// refuses at once (its queue is full), the hooks on the chain's ctx are
// told nothing; when the member queues the call, they are told once.
func TestChainObservedInMemberQueue(t *testing.T) {
	ctx := context.Background()
	m, err := memory.New(concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := ratelimit.Chain(m)
	held, err := c.Acquire(ctx, 1)
	if err != nil || !held.Acquired() {
		t.Fatal(held, err)
	}
	var first ratelimittest.QueueLog
	waiter := make(chan ratelimit.Lease, 1)
	go func() { lease, _ := c.Wait(waittrace.WithHooks(ctx, first.Hooks()), 1); waiter <- lease }()
	for m.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	var second ratelimittest.QueueLog
	if lease, err := c.Wait(waittrace.WithHooks(ctx, second.Hooks()), 1); err != nil || lease.Reason() != ratelimit.ReasonQueueFull {
		t.Fatalf("with the member's queue full: %v, %v; want a refusal (queue full)", lease, err)
	}
	if q, d := second.Told(); len(q)+len(d) != 0 {
		t.Errorf("refused at once, yet told Queued %d times, Dequeued %d times", len(q), len(d))
	}
	held.Release()
	if lease := <-waiter; !lease.Acquired() {
		t.Fatalf("the queued Wait: %v", lease)
	} else {
		lease.Release()
	}
	if q, d := first.Told(); len(q) != 1 || len(d) != 1 || !d[0].Granted {
		t.Errorf("queued in the member, told Queued %d times, Dequeued %v; want once each, a grant", len(q), d)
	}
}
