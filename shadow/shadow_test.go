package shadow_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/shadow"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects the refusals a shadow limiter reports.
type recorder struct {
	mu       sync.Mutex
	refusals []shadow.Refusal
}

func (r *recorder) record(_ context.Context, f shadow.Refusal) {
	r.mu.Lock()
	r.refusals = append(r.refusals, f)
	r.mu.Unlock()
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.refusals)
}

func newMemory(t *testing.T, cfg ratelimit.Config, clock ratelimit.Clock) memory.Limiter {
	t.Helper()
	l, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// The shadow limiter grants every request, and reports exactly the
// refusals that the same limit, enforced, makes on the same arrivals.
func TestShadowReportsExactlyTheEnforcedRefusals(t *testing.T) {
	for _, cfg := range []ratelimit.Config{
		tokenbucket.Config{Rate: 10, Burst: 5},
		fixedwindow.Config{Limit: 4, Window: time.Second},
		slidinglog.Config{Limit: 3, Window: time.Second},
	} {
		t.Run(typeName(cfg), func(t *testing.T) {
			clock := ratelimittest.NewClock()
			enforced := newMemory(t, cfg, clock)
			rec := &recorder{}
			s := shadow.New(newMemory(t, cfg, clock), rec.record)
			rng := rand.New(rand.NewPCG(1, 2))
			ctx := context.Background()
			var want []ratelimit.Lease
			var waits []bool
			for i := 0; i < 2000; i++ {
				clock.Advance(time.Duration(rng.IntN(int(60 * time.Millisecond))))
				permits := 1 + rng.IntN(2)
				e, err := enforced.Acquire(ctx, permits)
				if err != nil {
					t.Fatal(err)
				}
				var got ratelimit.Lease
				if i%2 == 0 {
					got, err = s.Acquire(ctx, permits)
				} else {
					got, err = s.Wait(ctx, permits)
				}
				if err != nil || !got.Acquired() || got.Limit() != -1 || got.Remaining() != -1 {
					t.Fatalf("step %d: shadow answered %v, %v; want a grant with no limit", i, got, err)
				}
				if !e.Acquired() {
					want = append(want, e)
					waits = append(waits, i%2 == 1)
				}
			}
			if len(want) == 0 {
				t.Fatal("the scenario made no refusal")
			}
			if len(rec.refusals) != len(want) {
				t.Fatalf("%d refusals reported, the enforced limit made %d", len(rec.refusals), len(want))
			}
			for i, r := range rec.refusals {
				ra, _ := r.Lease.RetryAfter()
				wa, _ := want[i].RetryAfter()
				if r.Err != nil || r.Lease.Reason() != want[i].Reason() || ra != wa || r.Wait != waits[i] || r.Permits == 0 {
					t.Fatalf("refusal %d: %+v, want %v", i, r, want[i])
				}
			}
			if st, est := stats(s), enforced.Stats(); st != est {
				t.Fatalf("Stats %+v, enforced %+v", st, est)
			}
		})
	}
}

func typeName(cfg ratelimit.Config) string {
	switch cfg.(type) {
	case tokenbucket.Config:
		return "tokenbucket"
	case fixedwindow.Config:
		return "fixedwindow"
	}
	return "slidinglog"
}

// A concurrency request the wrapped limiter refused holds no permit: its
// Release gives nothing back to the real limit.
func TestShadowGrantHoldsNoPermit(t *testing.T) {
	clock := ratelimittest.NewClock()
	inner := newMemory(t, concurrency.Config{Limit: 1}, clock)
	rec := &recorder{}
	s := shadow.New(inner, rec.record)
	ctx := context.Background()
	real, err := s.Acquire(ctx, 1)
	if err != nil || !real.Acquired() || real.Limit() != -1 {
		t.Fatalf("first: %v, %v", real, err)
	}
	if st := inner.Stats(); st.Available != 0 {
		t.Fatalf("the wrapped limiter's grant holds no permit: %+v", st)
	}
	for i := 0; i < 3; i++ {
		free, err := s.Wait(ctx, 1)
		if err != nil || !free.Acquired() || free.Limit() != -1 || free.Remaining() != -1 {
			t.Fatalf("shadow grant: %v, %v", free, err)
		}
		free.Release()
		if err := s.Refund(ctx, free, 1); err != nil {
			t.Fatal(err)
		}
		if st := inner.Stats(); st.Available != 0 {
			t.Fatalf("after releasing a shadow grant the real limit has %d available", st.Available)
		}
	}
	if rec.len() != 3 || !rec.refusals[0].Wait || rec.refusals[0].Lease.Reason() != ratelimit.ReasonLimit {
		t.Fatalf("refusals %+v", rec.refusals)
	}
	if _, ok := idleFor(s); ok {
		t.Fatal("idle while a permit is held")
	}
	real.Release()
	if st := inner.Stats(); st.Available != 1 {
		t.Fatalf("available %d after the real release", st.Available)
	}
	if _, ok := idleFor(s); !ok {
		t.Fatal("not idle once released")
	}
	// Refund releases a concurrency grant, once.
	again, err := s.Acquire(ctx, 1)
	if err != nil || !again.Acquired() || inner.Stats().Available != 0 {
		t.Fatalf("again: %v, %v", again, err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Refund(ctx, again, 1); err != nil {
			t.Fatal(err)
		}
		if st := inner.Stats(); st.Available != 1 {
			t.Fatalf("available %d after a refund", st.Available)
		}
	}
}

// A shadow limiter over a memory rate limiter allocates nothing per
// decision, grant or refusal.
func TestShadowAllocations(t *testing.T) {
	clock := ratelimittest.NewClock()
	for _, cfg := range []ratelimit.Config{
		tokenbucket.Config{Rate: 1e12, Burst: 1 << 40},
		fixedwindow.Config{Limit: 1, Window: time.Hour},
	} {
		s := shadow.New(newMemory(t, cfg, clock), nil)
		ctx := context.Background()
		if n := testing.AllocsPerRun(100, func() { s.Acquire(ctx, 1) }); n != 0 {
			t.Fatalf("%T: %v allocations per decision", cfg, n)
		}
	}
}

// In a Chain, a grant of the shadow limiter that a later member refuses is
// refunded to the wrapped limiter, as it would be were the limit enforced.
func TestShadowInChainRefunds(t *testing.T) {
	clock := ratelimittest.NewClock()
	inner := newMemory(t, fixedwindow.Config{Limit: 2, Window: time.Hour}, clock)
	rec := &recorder{}
	s := shadow.New(inner, rec.record)
	refusing := newMemory(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)
	chain := ratelimit.Chain(s, refusing)
	ctx := context.Background()
	if l, err := chain.Acquire(ctx, 1); err != nil || !l.Acquired() {
		t.Fatalf("first: %v, %v", l, err)
	}
	for i := 0; i < 3; i++ {
		if l, err := chain.Acquire(ctx, 1); err != nil || l.Acquired() {
			t.Fatalf("chain: %v, %v", l, err)
		}
	}
	if st := inner.Stats(); st.Available != 1 {
		t.Fatalf("the wrapped limiter has %d available, want 1 (its grants refunded)", st.Available)
	}
	if rec.len() != 0 {
		t.Fatalf("refusals %+v", rec.refusals)
	}
}

// Errors of the wrapped limiter other than ctx's are reported and granted;
// invalid calls and a closed shadow limiter are errors.
func TestShadowErrors(t *testing.T) {
	clock := ratelimittest.NewClock()
	inner := newMemory(t, fixedwindow.Config{Limit: 2, Window: time.Hour}, clock)
	rec := &recorder{}
	s := shadow.New(inner, rec.record)
	ctx := context.Background()
	l, err := s.Acquire(ctx, 3)
	if err != nil || !l.Acquired() || rec.len() != 1 || !errors.Is(rec.refusals[0].Err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("over capacity: %v, %v, %+v", l, err, rec.refusals)
	}
	if _, err := s.Acquire(ctx, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatalf("negative permits: %v", err)
	}
	//lint:ignore SA1012 a nil ctx is what is tested
	if _, err := s.Acquire(nil, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Fatalf("nil ctx: %v", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Wait(done, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("done ctx: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if _, err := inner.Acquire(ctx, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("the wrapped limiter is not closed: %v", err)
	}
	if rec.len() != 1 {
		t.Fatalf("refusals %+v", rec.refusals)
	}
	if shadow.New(nil, nil) != nil {
		t.Fatal("New(nil) is not nil")
	}
}

// A partitioned limiter evicts idle shadow partitions, and closes what
// they wrap.
func TestShadowPartitions(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 1, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var made []ratelimit.Limiter
	var mu sync.Mutex
	p, err := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			l := f.New()
			mu.Lock()
			made = append(made, l)
			mu.Unlock()
			return shadow.New(l, rec.record), nil
		},
		IdleTimeout: time.Second,
		Clock:       clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if l, err := p.Acquire(ctx, "a", 1); err != nil || !l.Acquired() {
			t.Fatalf("%v, %v", l, err)
		}
	}
	if rec.len() != 2 {
		t.Fatalf("%d refusals, want 2", rec.len())
	}
	for i := 0; i < 5 && p.Stats().Evicted == 0; i++ {
		clock.Advance(time.Second)
	}
	if p.Stats().Evicted != 1 {
		t.Fatalf("stats %+v: the idle shadow partition was not evicted", p.Stats())
	}
	if _, err := made[0].Acquire(ctx, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("the evicted partition's limiter was not closed: %v", err)
	}
}

// stats is control.Stats of l, which must have them.
func stats(l ratelimit.Limiter) ratelimit.Stats {
	st, err := control.Stats(l)
	if err != nil {
		panic(err)
	}
	return st
}

// idleFor is the IdleFor partitioned finds through l's Unwrap.
func idleFor(l ratelimit.Limiter) (time.Duration, bool) {
	il, ok := control.As[partitioned.Idler](l)
	if !ok {
		return 0, false
	}
	return il.IdleFor()
}

// A status check (0 permits) on a limit with nothing left is answered, and
// is not reported: it refuses no request.
func TestShadowStatusCheckIsNoRefusal(t *testing.T) {
	var rec recorder
	s := shadow.New(newMemory(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, ratelimittest.NewClock()), rec.record)
	s.Acquire(context.Background(), 1)
	if lease, err := s.Acquire(context.Background(), 0); err != nil || !lease.Acquired() {
		t.Fatalf("a status check: %v %v", lease, err)
	}
	if n := rec.len(); n != 0 {
		t.Fatalf("%d refusals reported for a status check", n)
	}
	s.Acquire(context.Background(), 1)
	if n := rec.len(); n != 1 {
		t.Fatalf("%d refusals reported, want the one request refused", n)
	}
}
