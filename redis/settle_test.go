package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

// TestSettle runs the settlement scenarios against the scripts, on a
// real server and on miniredis (where a user's own tests may run them).
func TestSettle(t *testing.T) {
	t.Run("Redis", func(t *testing.T) {
		conformance.RunSettle(t, factory(realClient(t)), conformance.Tick(time.Microsecond))
	})
	t.Run("Miniredis", func(t *testing.T) {
		_, c := miniClient(t)
		conformance.RunSettle(t, factory(c), conformance.Tick(time.Microsecond))
	})
}

// TestSettleRealClock: settlements racing decisions on Redis's own clock,
// from goroutines sharing a client, keep each algorithm's bound.
func TestSettleRealClock(t *testing.T) {
	conformance.RunSettleRealClock(t, factory(realClient(t)), 100*time.Millisecond)
}

// TestSettleExtremes: the largest charge (math.MaxInt, capped at 2^53
// counted) on the extreme configurations Validate accepts leaves memory
// and Redis with the same figures, now and later, and every call answers.
func TestSettleExtremes(t *testing.T) {
	client := realClient(t)
	ctx := context.Background()
	for _, cfg := range conformance.ExtremeConfigs() {
		if cfg.Capacity() == math.MaxInt64 {
			continue
		}
		t.Run(fmt.Sprintf("%T%+v", cfg, cfg), func(t *testing.T) {
			clock := ratelimittest.NewClock()
			mem, err := memory.New(cfg, memory.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			red, err := redis.New(client, fmt.Sprintf("settle-extreme-%d", keySeq.Add(1)), cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
			if err != nil {
				t.Fatal(err)
			}
			defer red.Close()
			ls := [2]ratelimit.Limiter{mem, red}
			var leases [2]ratelimit.Lease
			for i, l := range ls {
				if leases[i], err = control.Reserve(ctx, l, 1); err != nil || !leases[i].Acquired() {
					t.Fatalf("Reserve(1): %v, %v", leases[i], err)
				}
			}
			errs := [2]error{control.Settle(ctx, mem, leases[0], math.MaxInt), control.Settle(ctx, red, leases[1], math.MaxInt)}
			if errors.Is(errs[0], errors.ErrUnsupported) && errors.Is(errs[1], errors.ErrUnsupported) {
				return // concurrency
			}
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("Settle(MaxInt): %v, %v", errs[0], errs[1])
			}
			for _, step := range []time.Duration{0, time.Hour, 50 * 365 * 24 * time.Hour} {
				clock.Advance(step)
				m, err1 := mem.Acquire(ctx, 1)
				r, err2 := red.Acquire(ctx, 1)
				if err1 != nil || err2 != nil {
					t.Fatalf("after %v: %v, %v", step, err1, err2)
				}
				md, mok := m.RetryAfter()
				rd, rok := r.RetryAfter()
				if m.Acquired() != r.Acquired() || m.Remaining() != r.Remaining() || ceilMicro(md) != rd || mok != rok ||
					ceilMicro(m.ResetAfter()) != r.ResetAfter() {
					t.Fatalf("after %v:\nmemory %v reset %v\nredis  %v reset %v", step, m, m.ResetAfter(), r, r.ResetAfter())
				}
			}
		})
	}
}
