package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/partitioned"
)

// A Keyed over a partitioned limiter takes a grant back, as
// httplimit.Middleware asks of a route's policy that the global one refused.
func TestKeyedRefund(t *testing.T) {
	ctx := context.Background()
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, err := partitioned.New(partitioned.Config{New: f.ForKey})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := otel.NewRecorder()
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	k := otel.WrapKeyed(rec, p)
	defer k.Close()
	var _ ratelimit.Keyed = k
	g, _ := k.Acquire(ctx, "a", 2)
	if !g.Acquired() {
		t.Fatalf("Acquire(2): %v", g)
	}
	if err := control.Refund(ctx, k.For("a"), g, 2); err != nil {
		t.Fatal(err)
	}
	if again, _ := k.Acquire(ctx, "a", 2); !again.Acquired() {
		t.Fatalf("Acquire(2) after the refund: %v, want granted", again)
	}
}
