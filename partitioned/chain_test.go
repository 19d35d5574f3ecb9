package partitioned_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestChainOfPartitionAndGlobalSpendsNothing: the README's per-IP limit
// chained with a global one. With the global limit spent, refused chain
// attempts must not spend the IP's permits: For is a Refunder.
func TestChainOfPartitionAndGlobalSpendsNothing(t *testing.T) {
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 3, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	perIP, err := partitioned.New(partitioned.Config{New: f.ForKey})
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

// refusing is a limiter that refuses everything, as an exhausted global
// limit does, once told to (when proceed is not nil): it closes entered
// and waits for proceed first.
type refusing struct{ entered, proceed chan struct{} }

func (r refusing) Acquire(context.Context, int) (ratelimit.Lease, error) {
	if r.proceed != nil {
		close(r.entered)
		<-r.proceed
	}
	return ratelimit.Lease{}, nil
}

func (r refusing) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return r.Acquire(ctx, permits)
}

// TestChainGivesBackOverflowGrants: while MaxPartitions are busy, Overflow
// serves a Chain's first member, For(key); when the next member refuses,
// the grant goes back to Overflow. A concurrency permit kept there would
// be lost for every later overflow request.
func TestChainGivesBackOverflowGrants(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(concurrency.Config{Limit: 1}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	overflow, err := memory.New(concurrency.Config{Limit: 1}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer overflow.Close()
	l := newPartitioned(t, partitioned.Config{New: f.ForKey, MaxPartitions: 1, Overflow: overflow, Clock: clock})
	held, err := l.Acquire(bg, "a", 1) // a's partition is busy: the only place
	if err != nil || !held.Acquired() {
		t.Fatal(held, err)
	}
	defer held.Release()
	chain := ratelimit.Chain(l.For("b"), refusing{})
	for i := 0; i < 3; i++ {
		if lease, err := chain.Acquire(bg, 1); err != nil || lease.Acquired() {
			t.Fatalf("chain attempt %d: %v, %v; want refused", i, lease, err)
		}
	}
	if st := overflow.Stats(); st.Available != 1 {
		t.Fatalf("Overflow after refused chain attempts: %+v; want its permit back", st)
	}
	lease, err := l.Acquire(bg, "c", 1)
	if err != nil || !lease.Acquired() {
		t.Fatalf("a request served by Overflow: %v, %v", lease, err)
	}
	lease.Release()
	if st := overflow.Stats(); st.Available != 1 {
		t.Fatalf("Overflow after the release of its grant: %+v", st)
	}
}

// TestOverflowRefundNeverCreditsAPartition: a Chain's refund of a grant
// that Overflow made, when the key's partition was made in the meantime
// from the same Factory (which cannot tell its limiters' grants apart),
// goes to Overflow: the partition never grants more than its burst.
func TestOverflowRefundNeverCreditsAPartition(t *testing.T) {
	clock := ratelimittest.NewClock()
	tb, err := memory.NewFactory(tokenbucket.Config{Rate: 1.0 / 3600, Burst: 2}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := memory.NewFactory(concurrency.Config{Limit: 1}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	overflow := tb.New()
	defer overflow.Close()
	l := newPartitioned(t, partitioned.Config{MaxPartitions: 1, Overflow: overflow, Clock: clock,
		New: func(k string) (ratelimit.Limiter, error) {
			if k == "a" {
				return cc.New(), nil
			}
			return tb.New(), nil
		}})
	held, err := l.Acquire(bg, "a", 1)
	if err != nil || !held.Acquired() {
		t.Fatal(held, err)
	}
	gate := refusing{make(chan struct{}), make(chan struct{})}
	chain := ratelimit.Chain(l.For("b"), gate)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if lease, err := chain.Acquire(bg, 1); err != nil || lease.Acquired() {
			t.Errorf("chain: %v, %v; want refused", lease, err)
		}
	}()
	<-gate.entered // Overflow granted b; the chain refuses once told
	held.Release() // a is idle: b's partition can take its place
	grants := 0
	if g, _ := l.Acquire(bg, "b", 1); g.Acquired() {
		grants++
	}
	close(gate.proceed)
	wg.Wait()
	for i := 0; i < 3; i++ {
		if g, _ := l.Acquire(bg, "b", 1); g.Acquired() {
			grants++
		}
	}
	if grants != 2 {
		t.Fatalf("b's partition (Burst 2, no time passed) granted %d; want 2", grants)
	}
	if st := overflow.Stats(); st.Available != 2 {
		t.Fatalf("Overflow: %+v; want the refunded grant back", st)
	}
}

// TestOverflowGrantGoesToItsOwner: a partitioned limiter whose partitions
// are For of another passes that one's Overflow grants back to it, never
// to its own Overflow (made by the same Factory, which would take them).
func TestOverflowGrantGoesToItsOwner(t *testing.T) {
	clock := ratelimittest.NewClock()
	tb, err := memory.NewFactory(tokenbucket.Config{Rate: 1.0 / 3600, Burst: 1}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	innerOverflow, outerOverflow := tb.New(), tb.New()
	defer innerOverflow.Close()
	defer outerOverflow.Close()
	inner := newPartitioned(t, partitioned.Config{New: tb.ForKey, MaxPartitions: 1, Overflow: innerOverflow, Clock: clock})
	outer := newPartitioned(t, partitioned.Config{Overflow: outerOverflow, Clock: clock,
		New: func(k string) (ratelimit.Limiter, error) { return inner.For(k), nil }})
	if g, _ := inner.Acquire(bg, "a", 1); !g.Acquired() { // a, spent, holds inner's only place
		t.Fatal(g)
	}
	if g, _ := outerOverflow.Acquire(bg, 1); !g.Acquired() {
		t.Fatal(g)
	}
	if lease, err := ratelimit.Chain(outer.For("b"), refusing{}).Acquire(bg, 1); err != nil || lease.Acquired() {
		t.Fatalf("chain: %v, %v; want refused", lease, err)
	}
	if in, out := innerOverflow.Stats(), outerOverflow.Stats(); in.Available != 1 || out.Available != 0 {
		t.Fatalf("after the refund: inner Overflow %+v, outer %+v; want the grant back in the inner one only", in, out)
	}
}

// A refund whose ctx is done gives the permits back all the same, as a
// memory limiter's Refund does: a request whose client left still spends
// nothing of what it was refunded.
func TestRefundWithADoneCtx(t *testing.T) {
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := newPartitioned(t, partitioned.Config{New: f.ForKey})
	g, err := p.Acquire(bg, "k", 2)
	if err != nil || !g.Acquired() {
		t.Fatalf("Acquire(2): %v, %v", g, err)
	}
	done, cancel := context.WithCancel(bg)
	cancel()
	if err := p.Refund(done, "k", g, 2); err != nil {
		t.Fatalf("Refund with a done ctx: %v, want nil", err)
	}
	if l, _ := p.Acquire(bg, "k", 2); !l.Acquired() {
		t.Fatalf("after the refund: %v, want both permits back", l)
	}
	if err := p.Refund(nil, "k", g, 2); !errors.Is(err, ratelimit.ErrNilContext) {
		t.Fatalf("Refund with a nil ctx: %v, want ErrNilContext", err)
	}
}
