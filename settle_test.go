package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// A reservation has its grant's figures and Release, records its permits,
// and is claimed once; a refusal or the zero Lease is no reservation.
func TestReserved(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newMem(t, concurrency.Config{Limit: 3}, clock)
	g, _ := l.Acquire(bg, 2)
	r := g.Reserve(2)
	if !r.Acquired() || r.Remaining() != g.Remaining() || r.Limit() != g.Limit() || r.ResetAfter() != g.ResetAfter() {
		t.Fatalf("Reserved(%v) = %v: another grant's figures", g, r)
	}
	if grant, n, ok := r.Reservation(); !ok || n != 2 || grant != g {
		t.Fatalf("Reservation() = %v, %d, %v", grant, n, ok)
	}
	if _, _, ok := g.Reservation(); ok {
		t.Fatalf("a plain grant says it is a reservation")
	}
	r.Release() // the grant's Release: the 2 held come back
	if st, _ := control.Stats(l); st.Available != 3 {
		t.Fatalf("after the reservation's Release: %d available, want 3", st.Available)
	}
	l.Acquire(bg, 3)
	refused, _ := l.Acquire(bg, 1)
	if refused.Acquired() {
		t.Fatalf("Acquire(1) with 3 of 3 held: %v", refused)
	}
	for _, x := range []ratelimit.Lease{refused, {}} {
		if got := x.Reserve(1); got != x {
			t.Errorf("Reserved(%v) = %v, want it unchanged", x, got)
		}
		if err := x.ClaimSettlement(); !errors.Is(err, ratelimit.ErrInvalidLease) {
			t.Errorf("%v.ClaimSettlement() = %v, want ErrInvalidLease", x, err)
		}
	}
	if r.Settled() {
		t.Fatal("a new reservation says it is settled")
	}
	if err := r.ClaimSettlement(); err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimSettlement(); !errors.Is(err, ratelimit.ErrInvalidLease) || !r.Settled() {
		t.Fatalf("a second claim: %v (settled %v), want ErrInvalidLease", err, r.Settled())
	}

	// A rate grant's GrowsAfter is the grant's.
	tb := newMem(t, tokenbucket.Config{Rate: 4, Burst: 4}, clock)
	tg, _ := tb.Acquire(bg, 1)
	want, wok := tg.GrowsAfter(clock.Now())
	if got, ok := tg.Reserve(1).GrowsAfter(clock.Now()); got != want || ok != wok || !ok {
		t.Fatalf("GrowsAfter = %v, %v; want %v, %v", got, ok, want, wok)
	}
}

// Reserving allocates the record only: an Acquire allocates nothing.
func TestReserveAllocates(t *testing.T) {
	l := newMem(t, tokenbucket.Config{Rate: rate.Inf, Burst: 1}, ratelimittest.NewClock())
	if n := testing.AllocsPerRun(100, func() { l.Acquire(bg, 1) }); n != 0 {
		t.Errorf("Acquire: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { control.Reserve(bg, l, 1) }); n != 1 {
		t.Errorf("Reserve: %v allocations, want 1 (its record)", n)
	}
}

// A Chain's reservation settles each member's grant: both give back, or
// both are charged. A member that cannot settle refuses the settlement
// before any member settles.
func TestChainSettle(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, tokenbucket.Config{Rate: 1, Burst: 10}, clock)
	b := newMem(t, fixedwindow.Config{Limit: 20, Window: time.Hour}, clock)
	c := ratelimit.Chain(a, b)
	available := func() (int64, int64) {
		sa, _ := control.Stats(a)
		sb, _ := control.Stats(b)
		return sa.Available, sb.Available
	}
	r, err := control.Reserve(bg, c, 6)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(6): %v, %v", r, err)
	}
	if err := control.Settle(bg, c, r, 2); err != nil {
		t.Fatal(err)
	}
	if x, y := available(); x != 8 || y != 18 {
		t.Fatalf("6 settled at 2: available %d, %d; want 8, 18", x, y)
	}
	r, _ = control.Reserve(bg, c, 8)
	if err := control.Settle(bg, c, r, 13); err != nil {
		t.Fatal(err)
	}
	// 5 charged to each: the bucket holds -5 tokens, the window counts
	// 2 + 8 + 5 = 15 of 20.
	if x, y := available(); x != 0 || y != 5 {
		t.Fatalf("8 settled at 13: available %d, %d; want 0, 5", x, y)
	}
	if g, _ := c.Acquire(bg, 1); g.Acquired() {
		t.Fatalf("Acquire(1) while the bucket is in debt: %v", g)
	} else if d, _ := g.RetryAfter(); d != 6*time.Second {
		t.Fatalf("RetryAfter %v, want 6s (5 tokens of debt, then one)", d)
	}
	if err := control.Settle(bg, c, r, 1); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("a second settlement: %v", err)
	}
	if err := control.Settle(bg, ratelimit.Chain(a, b), r, 1); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("another chain's settlement: %v", err)
	}

	// FromRate cannot settle: the chain refuses, and its lease stays open.
	x := ratelimit.FromRate(rate.NewLimiter(1, 100))
	cx := ratelimit.Chain(b, x)
	r, err = control.Reserve(bg, cx, 1)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(1): %v, %v", r, err)
	}
	if err := control.Settle(bg, cx, r, 0); !errors.Is(err, errors.ErrUnsupported) || r.Settled() {
		t.Fatalf("settling a chain with FromRate: %v (settled %v), want ErrUnsupported", err, r.Settled())
	}
	if _, y := available(); y != 4 {
		t.Fatalf("the refused settlement changed b: %d available, want 4", y)
	}
	if _, err := control.Reserve(bg, x, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reserve on FromRate: %v, want ErrUnsupported", err)
	}
}

// A Chain settles a member that is a Chain itself (its grant has a
// Releaser, as a concurrency grant has): the inner members are charged
// too; a concurrency member, outer or inner, is left as it is.
func TestNestedChainSettle(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	b := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	cc := newMem(t, concurrency.Config{Limit: 5}, clock)
	c := ratelimit.Chain(a, ratelimit.Chain(b, cc))
	r, err := control.Reserve(bg, c, 1)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(1): %v, %v", r, err)
	}
	if err := control.Settle(bg, c, r, 10); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]ratelimit.Limiter{"outer": a, "inner": b} {
		if st, _ := control.Stats(l); st.Available != 0 {
			t.Errorf("%s member: %d available after 1 settled at 10, want 0", name, st.Available)
		}
	}
	if st, _ := control.Stats(cc); st.Available != 4 {
		t.Errorf("concurrency member: %d available, want 4 (its permit held until Release)", st.Available)
	}
	r.Release()
	if st, _ := control.Stats(cc); st.Available != 5 {
		t.Errorf("concurrency member after Release: %d available, want 5", st.Available)
	}
}

// A Chain made anew per request of the same members (partitioned.Func's
// way: Chain(perKey.For(key), global)) settles and refunds the grants of
// another such Chain; a Chain of other members does not.
func TestChainOfTheSameMembers(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, fixedwindow.Config{Limit: 100, Window: time.Hour}, clock)
	b := newMem(t, fixedwindow.Config{Limit: 100, Window: time.Hour}, clock)
	r, err := control.Reserve(bg, ratelimit.Chain(a, b), 50)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(50): %v, %v", r, err)
	}
	if err := control.Settle(bg, ratelimit.Chain(b, a), r, 1); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("settled by a Chain of the members in another order: %v", err)
	}
	if err := control.Settle(bg, ratelimit.Chain(a, b), r, 1); err != nil {
		t.Fatal(err)
	}
	g, _ := ratelimit.Chain(a, b).Acquire(bg, 10)
	if err := control.Refund(bg, ratelimit.Chain(a, b), g, 10); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]ratelimit.Limiter{"a": a, "b": b} {
		if st, _ := control.Stats(l); st.Available != 99 {
			t.Errorf("%s: %d available, want 99 (50 reserved, settled at 1; 10 granted, refunded)", name, st.Available)
		}
	}
}

// wrapped holds a limiter: comparable as a type, but == panics on the
// limiterFunc (a func) it may hold.
type wrapped struct{ ratelimit.Limiter }

// A Chain compares members that == cannot compare without panicking.
func TestChainOfUncomparableMembers(t *testing.T) {
	clock := ratelimittest.NewClock()
	m := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	f := wrapped{limiterFunc(m.Acquire)}
	g, err := ratelimit.Chain(f, m).Acquire(bg, 1)
	if err != nil || !g.Acquired() {
		t.Fatal(g, err)
	}
	if err := control.Refund(bg, ratelimit.Chain(f, m), g, 1); err != nil { // another Chain: not the same, no panic
		t.Fatal(err)
	}
}

// settleForwarder forwards Settle to what it wraps, as a wrapper of one's
// own may: for FromRate, an error wrapping ErrUnsupported at run time.
type settleForwarder struct{ ratelimit.Limiter }

func (f settleForwarder) Settle(ctx context.Context, lease ratelimit.Lease, actual int) error {
	return control.Settle(ctx, f.Limiter, lease, actual)
}

// A nested Chain that cannot settle says so (its error is joined), and a
// refund of a reservation whose settlement a member refused at run time is
// not made a second time: what the others gave back stays given once.
func TestChainSettleUnsupportedAtRunTime(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	x := ratelimit.FromRate(rate.NewLimiter(1, 100))
	nested := ratelimit.Chain(ratelimit.Chain(x), a)
	r, _ := control.Reserve(bg, nested, 1)
	if err := control.Settle(bg, nested, r, 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("settling a Chain whose nested Chain cannot settle: %v, want ErrUnsupported", err)
	}

	c := ratelimit.Chain(a, settleForwarder{x})
	a.Acquire(bg, 6) // the nested Chain's 1 was settled at 0 by a: 6 of 10 used
	r, err := control.Reserve(bg, c, 3)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(3): %v, %v", r, err)
	}
	if err := control.Refund(bg, c, r, 3); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("refund: %v, want the forwarder's ErrUnsupported", err)
	}
	if st, _ := control.Stats(a); st.Available != 4 {
		t.Fatalf("a after the refund: %d available, want 4 (its 3 given back once)", st.Available)
	}
}
