package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
)

// plain is a limiter that has none of the capabilities, nor unwraps.
type plain struct{ ratelimit.Limiter }

// self unwraps to itself, for ever.
type self struct{ ratelimit.Limiter }

func (s *self) Unwrap() ratelimit.Limiter { return s }

// resetting overrides Reset (its meaning changes) and unwraps to the rest.
type resetting struct {
	ratelimit.Limiter
	resets int
}

func (r *resetting) Reset(context.Context) error { r.resets++; return nil }
func (r *resetting) Unwrap() ratelimit.Limiter   { return r.Limiter }

func TestCapabilities(t *testing.T) {
	ctx := context.Background()
	inner, err := memory.New(concurrency.Config{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()

	for name, l := range map[string]ratelimit.Limiter{"plain": plain{inner}, "self": &self{plain{inner}}} {
		if err := control.Reset(ctx, l); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Reset = %v, want ErrUnsupported", name, err)
		}
		if _, err := control.Stats(l); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Stats = %v, want ErrUnsupported", name, err)
		}
		if err := control.Refund(ctx, l, ratelimit.Lease{}, 1); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Refund = %v, want ErrUnsupported", name, err)
		}
		if err := control.Reconfigure(l, concurrency.Config{Limit: 3}); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: Reconfigure = %v, want ErrUnsupported", name, err)
		}
	}
	if _, ok := control.As[interface{ Stats() ratelimit.Stats }](nil); ok {
		t.Error("As of a nil limiter found something")
	}

	// The first in the chain wins: Reset is the wrapper's, Stats the limiter's.
	r := &resetting{Limiter: inner}
	held, _ := r.Acquire(ctx, 1)
	if err := control.Reset(ctx, r); err != nil || r.resets != 1 {
		t.Fatalf("Reset = %v with %d resets of the wrapper, want the wrapper's", err, r.resets)
	}
	if st, err := control.Stats(r); err != nil || st.Available != 1 {
		t.Fatalf("Stats = %+v, %v; want the inner limiter's, 1 available", st, err)
	}
	if err := control.Refund(ctx, r, held, 1); err != nil {
		t.Fatal(err)
	}
	if st, _ := control.Stats(r); st.Available != 2 {
		t.Fatalf("after the refund through the wrapper: %+v, want 2 available", st)
	}
	if err := control.Reconfigure(r, concurrency.Config{Limit: 0}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("Reconfigure to an invalid config: %v, want ErrInvalidConfig", err)
	}
	if err := control.Reconfigure(r, concurrency.Config{Limit: 3}); err != nil {
		t.Fatal(err)
	}
	if st, _ := control.Stats(r); st.Available != 3 {
		t.Fatalf("after Reconfigure: %+v, want 3 available", st)
	}
}

// A reservation refunded through control is settled at what it keeps,
// once: a second refund, or a settlement after it, gives nothing more.
func TestRefundOfAReservation(t *testing.T) {
	ctx := context.Background()
	inner, err := memory.New(fixedwindow.Config{Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	r, err := control.Reserve(ctx, inner, 4)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(4): %v, %v", r, err)
	}
	if err := control.Refund(ctx, inner, r, 3); err != nil {
		t.Fatal(err)
	}
	if st, _ := control.Stats(inner); st.Available != 9 {
		t.Fatalf("after refunding 3 of a reservation of 4: %d available, want 9", st.Available)
	}
	if err := control.Refund(ctx, inner, r, 1); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("a second refund: %v, want ErrInvalidLease", err)
	}
	if err := control.Settle(ctx, inner, r, 0); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("a settlement after the refund: %v, want ErrInvalidLease", err)
	}
	if st, _ := control.Stats(inner); st.Available != 9 {
		t.Fatalf("after the refused calls: %d available, want 9", st.Available)
	}
}

// A concurrency limit's reservation, which has no cost to settle, is
// refunded as its grant is: its permit comes back.
func TestRefundOfAConcurrencyReservation(t *testing.T) {
	ctx := context.Background()
	l, err := memory.New(concurrency.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := control.Reserve(ctx, l, 1)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(1): %v, %v", r, err)
	}
	if err := control.Refund(ctx, l, r, 1); err != nil {
		t.Fatalf("Refund of the reservation: %v", err)
	}
	if g, err := l.Acquire(ctx, 1); err != nil || !g.Acquired() {
		t.Fatalf("Acquire(1) after the refund: %v, %v; want the permit back", g, err)
	}
}

// A Chain of a rate limit and a concurrency limit settles its rate member
// and leaves the concurrency member's grant, held until Release, alone.
func TestChainSettlesBesideAConcurrencyMember(t *testing.T) {
	ctx := context.Background()
	win, err := memory.New(fixedwindow.Config{Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer win.Close()
	conc, err := memory.New(concurrency.Config{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer conc.Close()
	c := ratelimit.Chain(win, conc)
	r, err := control.Reserve(ctx, c, 5)
	if err != nil || !r.Acquired() {
		t.Fatalf("Reserve(5): %v, %v", r, err)
	}
	if err := control.Settle(ctx, c, r, 1); err != nil {
		t.Fatalf("Settle: %v, want the window settled", err)
	}
	if st, _ := control.Stats(win); st.Available != 9 {
		t.Fatalf("window: %d available, want 9 (4 given back)", st.Available)
	}
	if st, _ := control.Stats(conc); st.Available != 5 {
		t.Fatalf("concurrency: %d available, want 5 (held until Release)", st.Available)
	}
	r.Release()
	if st, _ := control.Stats(conc); st.Available != 10 {
		t.Fatalf("concurrency after Release: %d available, want 10", st.Available)
	}
}
