package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestRefundCountsOut: a refund is as if the request had not been made:
// Stats' Granted no longer counts it, for a rate algorithm and for a
// concurrency limit, whose Refund is its first Release (a Release alone
// keeps the grant counted). A refund of a lease of another limiter counts
// nothing out.
func TestRefundCountsOut(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cfg       ratelimit.Config
		available int64 // after the kept grant is released and the other refunded
	}{
		{tokenbucket.Config{Rate: 1, Burst: 5}, 4},
		{fixedwindow.Config{Limit: 5, Window: time.Hour}, 4},
		{concurrency.Config{Limit: 5}, 5},
	} {
		cfg := c.cfg
		clock := ratelimittest.NewClock()
		l, err := memory.New(cfg, memory.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		other, _ := memory.New(cfg, memory.WithClock(clock))
		kept, _ := l.Acquire(ctx, 1)
		refunded, _ := l.Acquire(ctx, 2)
		foreign, _ := other.Acquire(ctx, 1)
		if !kept.Acquired() || !refunded.Acquired() || !foreign.Acquired() {
			t.Fatalf("%T: setup: %v %v %v", cfg, kept, refunded, foreign)
		}
		kept.Release()
		if err := l.Refund(ctx, refunded, 2); err != nil {
			t.Fatalf("%T: Refund: %v", cfg, err)
		}
		if err := l.Refund(ctx, foreign, 1); err != nil {
			t.Fatalf("%T: Refund of another limiter's lease: %v", cfg, err)
		}
		if got := l.Stats(); got.Granted != 1 || got.Available != c.available {
			t.Fatalf("%T: Stats after a kept grant and a refunded one: %+v, want Granted 1, %d available", cfg, got, c.available)
		}
		if got := other.Stats(); got.Granted != 1 {
			t.Fatalf("%T: the other limiter: %+v, want its grant counted", cfg, got)
		}
		l.Close()
		other.Close()
	}
}
