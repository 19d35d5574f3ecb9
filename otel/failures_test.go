package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/redis"
)

// With Recorder.CountRedisFailures given to redis.WithOnFailure, every call
// Redis could not answer is counted once, whatever the failure policy:
// FailOpen's grants and the fallback's answers too, which the answers do
// not show (without the hook they are not counted), and an error or a
// FailClosed refusal once, not twice. A failed Refund counts too.
func TestRedisFailuresHook(t *testing.T) {
	ctx := context.Background()
	cfg := fixedwindow.Config{Limit: 1, Window: time.Hour}
	mr := miniredis.RunT(t)
	client := newClient(t, mr.Addr())
	m := newMeter(t)
	type setup struct {
		policy string
		opts   []redis.Option
		rec    []limitotel.Option
		hook   bool
		want   int64 // failures counted after the server is gone
	}
	fallback := mustMemory(t, cfg, newClock())
	setups := []setup{
		{"open", []redis.Option{redis.WithFailurePolicy(redis.FailOpen)}, []limitotel.Option{limitotel.WithFailurePolicy(redis.FailOpen)}, true, 2},
		{"open-unhooked", []redis.Option{redis.WithFailurePolicy(redis.FailOpen)}, []limitotel.Option{limitotel.WithFailurePolicy(redis.FailOpen)}, false, 0},
		{"fallback", []redis.Option{redis.WithFallback(fallback)}, []limitotel.Option{limitotel.WithFallback()}, true, 2},
		{"closed", []redis.Option{redis.WithFailurePolicy(redis.FailClosed)}, []limitotel.Option{limitotel.WithFailurePolicy(redis.FailClosed)}, true, 2},
		{"error", nil, nil, true, 3}, // and the failed Refund
	}
	limiters := make([]*limitotel.Limiter, len(setups))
	grants := make([]ratelimit.Lease, len(setups))
	for i, s := range setups {
		rec, err := limitotel.NewRecorder(append(s.rec, limitotel.WithMeterProvider(m), limitotel.WithPolicy(s.policy), limitotel.WithBackend("redis"))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rec.Close() })
		opts := append(s.opts, redis.WithTimeout(time.Second))
		if s.hook {
			opts = append(opts, redis.WithOnFailure(rec.CountRedisFailures()))
		}
		l, err := redis.New(client, "otel-failures:"+s.policy, cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = rec.Wrap(l)
		t.Cleanup(func() { limiters[i].Close() })
		if grants[i], err = limiters[i].Acquire(ctx, 1); err != nil || !grants[i].Acquired() {
			t.Fatalf("%s: %v, %v while Redis answers", s.policy, grants[i], err)
		}
	}
	mr.Close() // Redis is gone: every call fails at once
	for i, s := range setups {
		for range 2 {
			lease, err := limiters[i].Acquire(ctx, 1)
			switch s.policy {
			case "open", "open-unhooked":
				if err != nil || !lease.Acquired() {
					t.Fatalf("%s: %v, %v; want a grant", s.policy, lease, err)
				}
			case "fallback": // its limit of 1: a grant, then a refusal
			case "closed":
				if err != nil || lease.Reason() != ratelimit.ReasonUnavailable {
					t.Fatalf("%s: %v, %v; want a refusal (unavailable)", s.policy, lease, err)
				}
			case "error":
				if !errors.Is(err, redis.ErrUnavailable) {
					t.Fatalf("%s: %v, %v; want ErrUnavailable", s.policy, lease, err)
				}
			}
		}
	}
	if err := limiters[len(setups)-1].Refund(ctx, grants[len(setups)-1], 1); !errors.Is(err, redis.ErrUnavailable) {
		t.Fatalf("refund: %v; want ErrUnavailable", err)
	}
	points := m.collect(t)
	var wants []want
	for _, s := range setups {
		wants = append(wants, want{failures, []string{"ratelimit.policy=" + s.policy}, s.want})
	}
	wants = append(wants,
		want{requests, []string{"ratelimit.policy=fallback", "ratelimit.result=acquired"}, 2},
		want{requests, []string{"ratelimit.policy=fallback", "ratelimit.result=refused", "ratelimit.reason=limit"}, 1})
	check(t, points, wants)
}
