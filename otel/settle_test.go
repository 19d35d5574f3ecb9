package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/partitioned"
)

const settledName = limitotel.SettledName

// Settlements through a wrapped limiter and through a Keyed's For count
// what they gave back and charged; a refused settlement counts nothing.
func TestSettledPermits(t *testing.T) {
	ctx := context.Background()
	m := newMeter(t)
	cfg := fixedwindow.Config{Limit: 10, Window: time.Hour}
	l := mustNew(t, mustMemory(t, cfg, newClock()), limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	a, err := control.Reserve(ctx, l, 5)
	if err != nil || !a.Acquired() {
		t.Fatalf("Reserve(5): %v, %v", a, err)
	}
	b, _ := control.Reserve(ctx, l, 4)
	if err := control.Settle(ctx, l, a, 2); err != nil {
		t.Fatal(err)
	}
	if err := control.Settle(ctx, l, b, 9); err != nil {
		t.Fatal(err)
	}
	if err := control.Settle(ctx, l, b, 1); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("a second settlement: %v", err)
	}
	if g, _ := l.Acquire(ctx, 0); g.Acquired() {
		t.Fatalf("after settling 5 at 2 and 4 at 9 (11 counted of 10): %v, want refused", g)
	}
	check(t, m.collect(t), []want{
		{settledName, []string{"ratelimit.settlement=returned", "ratelimit.algorithm=fixedwindow"}, 3},
		{settledName, []string{"ratelimit.settlement=charged"}, 5},
		{requests, []string{"ratelimit.result=acquired"}, 2},
		{permits, nil, 9},
	})

	// A Keyed's For(key): its decisions and settlements are recorded.
	m2 := newMeter(t)
	f, err := memory.NewFactory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := partitioned.New(partitioned.Config{New: f.ForKey})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m2))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	k := limitotel.WrapKeyed(rec, p)
	defer k.Close()
	c, err := control.Reserve(ctx, k.For("a"), 6)
	if err != nil || !c.Acquired() {
		t.Fatalf("Reserve(6) through For: %v, %v", c, err)
	}
	if err := control.Settle(ctx, k.For("a"), c, 1); err != nil {
		t.Fatal(err)
	}
	if g, _ := k.Acquire(ctx, "a", 9); !g.Acquired() {
		t.Fatalf("Acquire(9) after 6 settled at 1: %v, want granted", g)
	}
	check(t, m2.collect(t), []want{
		{settledName, []string{"ratelimit.settlement=returned"}, 5},
		{settledName, []string{"ratelimit.settlement=charged"}, 0},
		{requests, []string{"ratelimit.result=acquired"}, 2},
	})
}
