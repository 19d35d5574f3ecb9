package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clockOpt is the options of a limiter on clock, none for the real clock.
func clockOpt(clock *ratelimittest.Clock) []memory.Option {
	if clock == nil {
		return nil
	}
	return []memory.Option{memory.WithClock(clock)}
}

func factory(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
	l, err := memory.New(cfg, clockOpt(clock)...)
	if err != nil {
		t.Fatalf("memory.New(%#v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// fromFactory makes the limiter under test with a Factory, after a sibling
// that takes all its permits: limiters of one factory share no state.
func fromFactory(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
	f, err := memory.NewFactory(cfg, clockOpt(clock)...)
	if err != nil {
		t.Fatalf("memory.NewFactory(%#v): %v", cfg, err)
	}
	sibling := f.New()
	if lease, _ := sibling.Acquire(context.Background(), int(cfg.Capacity())); !lease.Acquired() {
		t.Fatalf("a new limiter refused its capacity: %v", lease)
	}
	l := f.New()
	t.Cleanup(func() { l.Close(); sibling.Close() })
	return l
}

func TestConformance(t *testing.T) {
	t.Run("New", func(t *testing.T) { conformance.Run(t, factory) })
	t.Run("Factory", func(t *testing.T) { conformance.Run(t, fromFactory) })
}

func TestExtremes(t *testing.T) { conformance.RunExtremes(t, factory) }

func TestRealClock(t *testing.T) {
	t.Run("New", func(t *testing.T) { conformance.RunRealClock(t, factory) })
	t.Run("Factory", func(t *testing.T) { conformance.RunRealClock(t, fromFactory) })
}

func TestQueueConformance(t *testing.T) {
	t.Run("New", func(t *testing.T) { conformance.RunQueue(t, factory) })
	t.Run("Factory", func(t *testing.T) { conformance.RunQueue(t, fromFactory) })
}

func TestFactoryInvalidConfig(t *testing.T) {
	for _, cfg := range []ratelimit.Config{nil, foreignConfig{}, fixedwindow.Config{Window: time.Second}} {
		if f, err := memory.NewFactory(cfg); f != nil || !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("NewFactory(%#v) = %v, %v; want ErrInvalidConfig", cfg, f, err)
		}
	}
}

// foreignConfig is a Config of no algorithm package.
type foreignConfig struct{ ratelimit.Config }

// Decisions allocate nothing: Acquire, Wait and Release, granted and refused.
func TestDecisionsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	for _, c := range benchConfigs {
		t.Run(c.name, func(t *testing.T) {
			l, _ := memory.New(c.cfg)
			defer l.Close()
			l.Acquire(ctx, 1) // the first concurrency lease allocates its handle
			grant := func() {
				a, _ := l.Acquire(ctx, 1)
				w, _ := l.Wait(ctx, 1)
				if !a.Acquired() || !w.Acquired() {
					t.Fatalf("refused: %v, %v", a, w)
				}
				a.Release()
				w.Release()
			}
			grant()
			if n := testing.AllocsPerRun(100, grant); n != 0 {
				t.Errorf("grants: %v allocations per run", n)
			}
		})
	}
	l, _ := memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour})
	defer l.Close()
	l.Acquire(ctx, 1)
	if n := testing.AllocsPerRun(100, func() {
		if lease, _ := l.Acquire(ctx, 1); lease.Acquired() {
			t.Fatal("granted over the limit")
		}
	}); n != 0 {
		t.Errorf("refusals: %v allocations per run", n)
	}
}

// TestClosedLimiterLeavesItsFactory: a Reconfigure of a closed limiter
// (conformance.RunQueue checks that it and every other call return
// ErrClosed) leaves the limiters that share its configuration, a
// Factory's, as they were. Before Close, Refund refuses a nil ctx as
// Acquire does, and a done one still gives the permits back (nothing
// waits).
func TestClosedLimiterLeavesItsFactory(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		cfg, other ratelimit.Config
	}{
		{"fixedwindow", fixedwindow.Config{Limit: 3, Window: time.Minute}, fixedwindow.Config{Limit: 7, Window: time.Minute}},
		{"concurrency", concurrency.Config{Limit: 3}, concurrency.Config{Limit: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := memory.NewFactory(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			closed, sibling := f.New(), f.New()
			defer sibling.Close()
			g, err := closed.Acquire(ctx, 1)
			if err != nil || !g.Acquired() {
				t.Fatalf("Acquire: %v, %v", g, err)
			}
			if err := closed.Refund(nil, g, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck // a nil ctx on purpose
				t.Errorf("Refund with a nil ctx: %v, want ErrNilContext", err)
			}
			done, cancel := context.WithCancel(ctx)
			cancel()
			if err := closed.Refund(done, g, 1); err != nil || closed.Stats().Available != tc.cfg.Capacity() {
				t.Errorf("Refund with a done ctx: %v, %d available; want the permit back (nothing waits)", err, closed.Stats().Available)
			}
			closed.Close()
			if err := closed.Reconfigure(tc.other); !errors.Is(err, ratelimit.ErrClosed) {
				t.Errorf("Reconfigure after Close: %v, want ErrClosed", err)
			}
			if s, err := sibling.Acquire(ctx, 0); err != nil || s.Limit() != tc.cfg.Capacity() {
				t.Errorf("sibling after the closed one's Reconfigure: %v, %v; want the old limit %d", s, err, tc.cfg.Capacity())
			}
		})
	}
}
