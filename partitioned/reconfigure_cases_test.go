package partitioned_test

import (
	"testing"
	"time"

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
	l := newPartitioned(t, partitioned.Config[string]{Key: identity, New: memoryOf(fixedwindow.Config{Limit: 5, Window: time.Second}, clock), Clock: clock})
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
	l := newPartitioned(t, partitioned.Config[string]{Key: identity, New: f.ForKey, Clock: clock})
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
