package policy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

// A key's reservation under a policy settles through Keyed's For; one made
// before a change of the policy's limit (same algorithm) is still charged;
// after a change of algorithm the new limiters do not know it.
func TestRegistrySettle(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	s.Create(ctx, window("tokens", 100, "user", "web"), "a")
	r := newRegistry(t, s, Options{})
	k := r.Keyed("tokens", "web")
	lim := k.(interface {
		For(string) ratelimit.Limiter
	}).For("u")
	a, err := control.Reserve(ctx, lim, 40)
	if err != nil || !a.Acquired() {
		t.Fatalf("Reserve(40): %v, %v", a, err)
	}
	if err := control.Settle(ctx, lim, a, 10); err != nil {
		t.Fatal(err)
	}
	b, _ := control.Reserve(ctx, lim, 20) // 30 counted
	v := update(t, s, window("tokens", 50, "user", "web")).Version
	waitFor(t, time.Second, "the update", applied(r, "tokens", v))
	if err := control.Settle(ctx, lim, b, 35); err != nil { // 15 charged
		t.Fatal(err)
	}
	if p, _ := r.Peek(ctx, "tokens", "u"); p.Remaining() != 5 {
		t.Fatalf("after 40 at 10, then 20 at 35 across a change to 50: %v, want 5 left", p)
	}
	if err := control.Settle(ctx, r.Keyed("tokens", "mobile").(interface {
		For(string) ratelimit.Limiter
	}).For("u"), a, 1); !errors.Is(err, ErrForbidden) {
		t.Fatalf("settling for an application the policy does not allow: %v", err)
	}
	c, _ := control.Reserve(ctx, lim, 5)
	p := Policy{Name: "tokens", Config: window("x", 50, "user").Config, Key: "ip", Apps: []string{"web"}} // another key kind: replaced
	v = update(t, s, p).Version
	waitFor(t, time.Second, "the update", applied(r, "tokens", v))
	if err := control.Settle(ctx, lim, c, 50); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("settling a grant of replaced limiters: %v, want ErrInvalidLease", err)
	}
}
