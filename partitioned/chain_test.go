package partitioned_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
)

// TestChainOfPartitionAndGlobalSpendsNothing: the README's per-IP limit
// chained with a global one. With the global limit spent, refused chain
// attempts must not spend the IP's permits: For is a Refunder.
func TestChainOfPartitionAndGlobalSpendsNothing(t *testing.T) {
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 3, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	perIP, err := partitioned.New(partitioned.Config[string]{Key: func(ip string) string { return ip }, New: f.ForKey})
	if err != nil {
		t.Fatal(err)
	}
	defer perIP.Close()
	global, err := memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer global.Close()
	ctx := context.Background()
	if g, _ := global.Acquire(ctx, 1); !g.Acquired() {
		t.Fatal(g)
	}
	chain := ratelimit.Chain(perIP.For("192.0.2.1"), global)
	for i := 0; i < 3; i++ {
		if lease, err := chain.Acquire(ctx, 1); err != nil || lease.Acquired() {
			t.Fatalf("attempt %d with the global limit spent: %v, %v; want refused", i, lease, err)
		}
	}
	if g, _ := perIP.Acquire(ctx, "192.0.2.1", 3); !g.Acquired() {
		t.Fatalf("the IP's 3 permits after 3 refused chain attempts: %v; the attempts spent them", g)
	}
}
