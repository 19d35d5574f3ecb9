package partitioned_test

import (
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// A refused Reconfigure (another algorithm) is still remembered: every new
// partition fails to be created afterwards.
func TestReconfigureRefusedLeavesCreation(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newPartitioned(t, partitioned.Config{New: memoryOf(fixedwindow.Config{Limit: 5, Window: time.Second}, clock), Clock: clock})
	err := l.Reconfigure(tokenbucket.Config{Rate: 1, Burst: 1})
	t.Logf("Reconfigure to another algorithm with no live partition: %v", err)
	lease, err := l.Acquire(bg, "new", 1)
	if err != nil || !lease.Acquired() {
		t.Errorf("Acquire on a new key after a refused Reconfigure: %v, %v", lease, err)
	}
}

func TestReconfigureFactoryPartitionsCapacity(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 5, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := newPartitioned(t, partitioned.Config{New: f.ForKey, Clock: clock})
	l.Acquire(bg, "a", 1)
	l.Acquire(bg, "b", 1)
	if err := l.Reconfigure(fixedwindow.Config{Limit: 10, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if lease, err := l.Acquire(bg, k, 8); err != nil || !lease.Acquired() {
			t.Errorf("partition %q: Acquire(8) after the limit rose to 10: %v, %v", k, lease, err)
		}
	}
}

// TestReconfigureAsksAReconfigurer: with only an exempt key live (NoLimit,
// which cannot be reconfigured), a config of another algorithm is still
// refused, asked of a limiter New makes; and a key whose limiter refuses a
// config keeps New's, rather than getting no partition.
func TestReconfigureAsksAReconfigurer(t *testing.T) {
	clock := ratelimittest.NewClock()
	tb := memoryOf(tokenbucket.Config{Rate: 10, Burst: 10}, clock)
	fw := memoryOf(fixedwindow.Config{Limit: 5, Window: time.Second}, clock)
	l := newPartitioned(t, partitioned.Config{Clock: clock,
		New: func(k string) (ratelimit.Limiter, error) {
			switch k {
			case "healthcheck":
				return partitioned.NoLimit(), nil
			case "legacy":
				return fw(k)
			}
			return tb(k)
		}})
	if _, err := l.Acquire(bg, "healthcheck", 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Reconfigure(fixedwindow.Config{Limit: 5, Window: time.Second}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("Reconfigure to another algorithm, only NoLimit live: %v; want ErrInvalidConfig", err)
	}
	if err := l.Reconfigure(tokenbucket.Config{Rate: 10, Burst: 3}); err != nil {
		t.Fatal(err)
	}
	if lease, err := l.Acquire(bg, "alice", 1); err != nil || lease.Limit() != 3 {
		t.Fatalf("a new key after Reconfigure: %v, %v; want Limit 3", lease, err)
	}
	lease, err := l.Acquire(bg, "legacy", 1)
	if err != nil || !lease.Acquired() || lease.Limit() != 5 {
		t.Fatalf("a new key whose limiter refuses the config: %v, %v; want served under its own (Limit 5)", lease, err)
	}
}
