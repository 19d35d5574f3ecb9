package otel_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/shadow"
)

func TestRedisCountsMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	testRedisCounts(t, mr.Addr())
}

func TestRedisCountsRealServer(t *testing.T) {
	testRedisCounts(t, startRedis(t))
}

func newClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// A scripted sequence on a Redis fixed window: grants, refusals, a waiter,
// an error and a refund, each Redis call timed; then the failures of a
// server that does not answer, under FailError and FailClosed.
func testRedisCounts(t *testing.T, addr string) {
	m := newMeter(t)
	clock := newClock()
	ctx := context.Background()
	cfg := fixedwindow.Config{Limit: 2, Window: time.Second}
	inner, err := redis.New(newClient(t, addr), "otel-test:"+t.Name(), cfg, redis.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, inner, limitotel.WithMeterProvider(m), limitotel.WithPolicy("fleet"), limitotel.WithConfig(cfg))
	base := []string{"ratelimit.policy=fleet", "ratelimit.algorithm=fixedwindow", "ratelimit.backend=redis", "ratelimit.mode=enforce"}
	with := func(kv ...string) []string { return append(append([]string(nil), base...), kv...) }

	var grant ratelimit.Lease
	for i, wantGrant := range []bool{true, true, false} {
		lease, err := l.Acquire(ctx, 1)
		if err != nil || lease.Acquired() != wantGrant {
			t.Fatalf("acquire %d: %v, %v", i, lease, err)
		}
		if wantGrant {
			grant = lease
		}
	}
	dctx, cancel := context.WithDeadline(ctx, clock.Now().Add(time.Millisecond))
	if lease, err := l.Wait(dctx, 1); err != nil || lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("deadline: %v, %v", lease, err)
	}
	cancel()
	waiter := waitAsync(ctx, l, 1)
	if err := clock.WaitForTimers(ctx, 1); err != nil { // its sleep's timer is armed
		t.Fatal(err)
	}
	waitQueued(t, m, 1) // and then it is counted
	clock.Advance(2 * time.Second)
	if a := <-waiter; a.err != nil || !a.lease.Acquired() {
		t.Fatalf("waiter: %v, %v", a.lease, a.err)
	}
	if _, err := l.Acquire(ctx, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, grant, 1); err != nil {
		t.Fatal(err)
	}
	check(t, m.collect(t), []want{
		{requests, with("ratelimit.result=acquired"), 3},
		{requests, with("ratelimit.result=refused", "ratelimit.reason=limit"), 1},
		{requests, with("ratelimit.result=refused", "ratelimit.reason=deadline"), 1},
		{requests, with("ratelimit.result=error", "error.type=exceeds_limit"), 1},
		{requests, nil, 6},
		{permits, with(), 3},
		{queued, with(), 0},
		{inQueue, with("ratelimit.result=acquired"), 1},
		{inQueue, with("ratelimit.result=refused"), 0}, // the deadline's refusal came at once
		// Acquire 4 times and Refund once; Wait is not a backend call.
		{backDur, with("ratelimit.failure_policy=error", "ratelimit.result=acquired"), 3},
		{backDur, with("ratelimit.failure_policy=error", "ratelimit.result=refused"), 1},
		{backDur, with("ratelimit.failure_policy=error", "ratelimit.result=error"), 1},
		{failures, with("ratelimit.failure_policy=error"), 0},
		{avail, nil, 0}, // not asked of Redis at every collection
	})
	// It slept from the call until its timer fired, at the window's end,
	// and read the clock then or once it had moved the whole 2s on.
	checkSum(t, m.collect(t), inQueue, 1e-6, 2, with("ratelimit.result=acquired")...)

	// A server that is not there: each call fails at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	down := newClient(t, dead)
	for _, p := range []redis.FailurePolicy{redis.FailError, redis.FailClosed} {
		dl, err := redis.New(down, "otel-test:down", cfg, redis.WithFailurePolicy(p), redis.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		w := mustNew(t, dl, limitotel.WithMeterProvider(m), limitotel.WithPolicy("down"), limitotel.WithFailurePolicy(p))
		for i := 0; i < 2; i++ {
			lease, err := w.Acquire(ctx, 1)
			switch p {
			case redis.FailError:
				if !errors.Is(err, redis.ErrUnavailable) {
					t.Fatalf("FailError: %v, %v", lease, err)
				}
			case redis.FailClosed:
				if err != nil || lease.Reason() != ratelimit.ReasonUnavailable {
					t.Fatalf("FailClosed: %v, %v", lease, err)
				}
			}
		}
	}
	down1 := []string{"ratelimit.policy=down", "ratelimit.backend=redis", "ratelimit.algorithm=unknown"}
	check(t, m.collect(t), []want{
		{failures, append(down1, "ratelimit.failure_policy=error"), 2},
		{failures, append(down1, "ratelimit.failure_policy=closed"), 2},
		{requests, append(down1, "ratelimit.result=error", "error.type=unavailable"), 2},
		{requests, append(down1, "ratelimit.result=refused", "ratelimit.reason=unavailable"), 2},
		{backDur, append(down1, "ratelimit.failure_policy=error", "ratelimit.result=error"), 2},
		{backDur, append(down1, "ratelimit.failure_policy=closed", "ratelimit.result=refused"), 2},
	})
}

// Shadow mode over Redis: every request granted, the refusals counted.
func TestRedisShadow(t *testing.T) {
	mr := miniredis.RunT(t)
	m := newMeter(t)
	ctx := context.Background()
	cfg := fixedwindow.Config{Limit: 2, Window: time.Hour}
	inner, err := redis.New(newClient(t, mr.Addr()), "otel-test:shadow", cfg)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	s, err := limitotel.Shadow(inner, func(context.Context, shadow.Refusal) { refused++ },
		limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 5; i++ {
		if lease, err := s.Acquire(ctx, 1); err != nil || !lease.Acquired() {
			t.Fatal(lease, err)
		}
	}
	if refused != 3 {
		t.Fatalf("%d refusals reported, want 3", refused)
	}
	kv := []string{"ratelimit.mode=shadow", "ratelimit.backend=redis", "ratelimit.algorithm=fixedwindow"}
	check(t, m.collect(t), []want{
		{requests, append(kv, "ratelimit.result=acquired"), 2},
		{requests, append(kv, "ratelimit.result=refused", "ratelimit.reason=limit"), 3},
		{backDur, kv, 5},
	})
}

// A Redis concurrency limit's Refund releases its lease, a script call of
// its own: it is timed in ratelimit.backend.duration, as a rate limit's
// Refund is, besides the Acquire that made the lease.
func TestRedisConcurrencyRefundTimed(t *testing.T) {
	mr := miniredis.RunT(t)
	m := newMeter(t)
	ctx := context.Background()
	cfg := concurrency.Config{Limit: 2}
	inner, err := redis.New(newClient(t, mr.Addr()), "otel-test:"+t.Name(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, inner, limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	lease, err := l.Acquire(ctx, 1)
	if err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	if err := l.Refund(ctx, lease, 1); err != nil {
		t.Fatal(err)
	}
	if st := inner.Stats(); st.Available != 2 {
		t.Fatalf("after the refund: %+v, want the 2 permits available", st)
	}
	kv := []string{"ratelimit.backend=redis", "ratelimit.algorithm=concurrency"}
	check(t, m.collect(t), []want{
		{backDur, append(kv, "ratelimit.result=acquired"), 2},
		{active, kv, 0},
		{leaseDur, kv, 1},
	})
}
