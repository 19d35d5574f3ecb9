package partitioned_test

import (
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func factoryOf(t *testing.T, cfg ratelimit.Config, clock ratelimit.Clock) *memory.Factory {
	t.Helper()
	f, err := memory.NewFactory(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A key's reservation settles on its partition; when the partition was
// evicted meanwhile, it is made again and charged the excess.
func TestSettleEvictedPartition(t *testing.T) {
	clock := ratelimittest.NewClock()
	f := factoryOf(t, tokenbucket.Config{Rate: 10, Burst: 10}, clock)
	p := newPartitioned(t, partitioned.Config{New: f.ForKey, IdleTimeout: time.Second, Clock: clock})
	a, err := control.Reserve(bg, p.For("a"), 6)
	if err != nil || !a.Acquired() {
		t.Fatalf("Reserve(6): %v, %v", a, err)
	}
	if err := control.Settle(bg, p.For("a"), a, 2); err != nil {
		t.Fatal(err)
	}
	if g, _ := p.Acquire(bg, "a", 8); !g.Acquired() || g.Remaining() != 0 {
		t.Fatalf("Acquire(8) after 6 settled at 2: %v, want granted with 0 left", g)
	}
	b, _ := control.Reserve(bg, p.For("b"), 10)
	clock.Advance(3 * time.Second) // b's bucket full again at 1s, idle: evicted
	if s := p.Stats(); s.Evicted != 2 || s.Live != 0 {
		t.Fatalf("%+v, want both partitions evicted", s)
	}
	if err := control.Settle(bg, p.For("b"), b, 30); err != nil {
		t.Fatal(err)
	}
	// Made again, full, and charged 20: 10 tokens of debt, 11 to wait for.
	g, _ := p.Acquire(bg, "b", 1)
	if d, _ := g.RetryAfter(); g.Acquired() || d != 1100*time.Millisecond {
		t.Fatalf("Acquire(1) after the charge: %v, want refused for 1.1s", g)
	}
	if err := control.Settle(bg, p.For("b"), b, 30); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("a second settlement: %v", err)
	}
}

// An Overflow grant settles on Overflow; a key whose partition cannot be
// made again (MaxPartitions busy) is an error that settles nothing.
func TestSettleOverflowAndNoPartition(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 1, Burst: 10}
	f := factoryOf(t, cfg, clock)
	overflow, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer overflow.Close()
	p := newPartitioned(t, partitioned.Config{New: f.ForKey, MaxPartitions: 1, Overflow: overflow, IdleTimeout: time.Second, Clock: clock})
	control.Reserve(bg, p.For("a"), 5) // a holds the one partition
	o, err := control.Reserve(bg, p.For("b"), 4)
	if err != nil || !o.Acquired() || overflow.Stats().Available != 6 {
		t.Fatalf("Reserve(4) served by Overflow: %v, %v, %+v", o, err, overflow.Stats())
	}
	if err := control.Settle(bg, p.For("b"), o, 7); err != nil {
		t.Fatal(err)
	}
	if st := overflow.Stats(); st.Available != 3 {
		t.Fatalf("Overflow after 4 settled at 7: %+v, want 3 available", st)
	}

	q := newPartitioned(t, partitioned.Config{New: f.ForKey, MaxPartitions: 1, IdleTimeout: time.Second, Clock: clock})
	c, _ := control.Reserve(bg, q.For("c"), 3)
	clock.Advance(5 * time.Second) // c is full again, evicted
	if d, _ := control.Reserve(bg, q.For("d"), 10); !d.Acquired() {
		t.Fatalf("d: %v", d) // d holds the one partition
	}
	before := q.Stats()
	if err := control.Settle(bg, q.For("c"), c, 9); !errors.Is(err, partitioned.ErrNoPartition) || c.Settled() {
		t.Fatalf("settling c with MaxPartitions busy: %v (settled %v), want ErrNoPartition, unsettled", err, c.Settled())
	}
	if after := q.Stats(); after != before {
		t.Fatalf("the refused settlement changed Stats: %+v, then %+v", before, after)
	}
	// Nothing to charge: c's partition is not made again, and the lease
	// is settled as nothing.
	if err := control.Settle(bg, q.For("c"), c, 1); err != nil || !c.Settled() {
		t.Fatalf("settling c at less than reserved: %v (settled %v)", err, c.Settled())
	}
	if after := q.Stats(); after != before {
		t.Fatalf("a settlement with nothing to charge changed Stats: %+v, then %+v", before, after)
	}
}

// An Overflow grant held until Release (a concurrency limiter's) has no
// cost to settle: Settle says so, and the permit comes back on Release; a
// refund of such a reservation (not settled) releases it.
func TestSettleOverflowConcurrency(t *testing.T) {
	over, err := memory.New(concurrency.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	f, err := memory.NewFactory(concurrency.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := newPartitioned(t, partitioned.Config{New: f.ForKey, MaxPartitions: 1, Overflow: over})
	if held, _ := p.Acquire(bg, "a", 1); !held.Acquired() { // a's partition is busy
		t.Fatal(held)
	}
	r, err := control.Reserve(bg, p.For("b"), 1) // served by Overflow
	if err != nil || !r.Acquired() {
		t.Fatal(r, err)
	}
	if err := control.Settle(bg, p.For("b"), r, 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Settle: %v, want ErrUnsupported", err)
	}
	r.Release()
	r, err = control.Reserve(bg, p.For("b"), 1)
	if err != nil || !r.Acquired() {
		t.Fatalf("after the Release: %v, %v; want Overflow's permit back", r, err)
	}
	if err := control.Refund(bg, p.For("b"), r, 1); err != nil {
		t.Fatal(err)
	}
	if g, _ := over.Acquire(bg, 1); !g.Acquired() {
		t.Fatalf("Overflow's permit was not given back by the refund: %v", g)
	}
}

// An Overflow that is a Chain settles its grant.
func TestSettleOverflowChain(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := fixedwindow.Config{Limit: 10, Window: time.Hour}
	f := factoryOf(t, cfg, clock)
	inner, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	p := newPartitioned(t, partitioned.Config{New: f.ForKey, MaxPartitions: 1, Overflow: ratelimit.Chain(inner), Clock: clock})
	control.Reserve(bg, p.For("a"), 1)           // a holds the one partition
	r, err := control.Reserve(bg, p.For("b"), 5) // served by Overflow
	if err != nil || !r.Acquired() {
		t.Fatal(r, err)
	}
	if err := control.Settle(bg, p.For("b"), r, 8); err != nil {
		t.Fatal(err)
	}
	if st := inner.Stats(); st.Available != 2 {
		t.Fatalf("Overflow's member after 5 settled at 8: %+v, want 2 available", st)
	}
}
