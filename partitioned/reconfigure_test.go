package partitioned_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// limitOf is the limit key's partition decides with (a status check).
func limitOf(t *testing.T, l *partitioned.Limiter, key string) int64 {
	t.Helper()
	lease, err := l.Acquire(bg, key, 0)
	if err != nil {
		t.Fatalf("Acquire(%q, 0): %v", key, err)
	}
	return lease.Limit()
}

func TestReconfigure(t *testing.T) {
	clock := ratelimittest.NewClock()
	old := fixedwindow.Config{Limit: 5, Window: time.Second}
	l := newPartitioned(t, partitioned.Config{New: memoryOf(old, clock), Clock: clock})
	l.Acquire(bg, "a", 4)
	if err := l.Reconfigure(fixedwindow.Config{Limit: 0, Window: time.Second}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("Reconfigure with Limit 0: %v", err)
	}
	if err := l.Reconfigure(nil); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("Reconfigure(nil): %v", err)
	}
	if got := limitOf(t, l, "a"); got != 5 {
		t.Fatalf("after refused changes, limit %d, want 5", got)
	}
	if err := l.Reconfigure(fixedwindow.Config{Limit: 8, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	// A live partition carries its count (4 of 8); a new one starts at 8.
	if g, _ := l.Acquire(bg, "a", 4); !g.Acquired() || g.Limit() != 8 || g.Remaining() != 0 {
		t.Fatalf("live partition after the change: %v, want granted 4 of 8, none left", g)
	}
	if got := limitOf(t, l, "b"); got != 8 {
		t.Fatalf("new partition's limit %d, want 8", got)
	}
	// A config of another algorithm: memory partitions refuse it, named,
	// and nothing changes.
	err := l.Reconfigure(tokenbucket.Config{Rate: 1, Burst: 1})
	if !errors.Is(err, ratelimit.ErrInvalidConfig) || !strings.Contains(err.Error(), `partition "`) {
		t.Fatalf("Reconfigure to another algorithm: %v", err)
	}
	if got := limitOf(t, l, "c"); got != 8 {
		t.Fatalf("a new partition after a refused change: limit %d, want 8", got)
	}
}

// Partitions created while Reconfigure runs end up with the new config.
func TestReconfigureRacesCreation(t *testing.T) {
	for round := 0; round < 20; round++ {
		l := newPartitioned(t, partitioned.Config{New: memoryOf(fixedwindow.Config{Limit: 5, Window: time.Hour}, nil)})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 50; k++ {
					l.Acquire(bg, fmt.Sprintf("%d-%d", g, k), 1)
				}
			}()
		}
		if err := l.Reconfigure(fixedwindow.Config{Limit: 7, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for g := 0; g < 4; g++ {
			for k := 0; k < 50; k++ {
				if got := limitOf(t, l, fmt.Sprintf("%d-%d", g, k)); got != 7 {
					t.Fatalf("round %d: partition %d-%d has limit %d after Reconfigure, want 7", round, g, k, got)
				}
			}
		}
	}
}

func TestReset(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := newPartitioned(t, partitioned.Config{New: memoryOf(tokenbucket.Config{Rate: 1, Burst: 3}, clock), Clock: clock})
	l.Acquire(bg, "a", 3)
	if err := l.Reset(bg, "a"); err != nil {
		t.Fatal(err)
	}
	if g, _ := l.Acquire(bg, "a", 3); !g.Acquired() {
		t.Fatalf("after Reset: %v, want the full burst", g)
	}
	if err := l.Reset(bg, "new"); err != nil { // made, then reset: a no-op
		t.Fatal(err)
	}
	noReset := newPartitioned(t, partitioned.Config{New: func(string) (ratelimit.Limiter, error) {
		return ratelimit.Chain(must(memory.New(tokenbucket.Config{Rate: 1, Burst: 1}))), nil
	}})
	if err := noReset.Reset(bg, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset of a Chain partition: %v, want ErrUnsupported", err)
	}
	full := newPartitioned(t, partitioned.Config{New: memoryOf(tokenbucket.Config{Rate: 1, Burst: 1}, clock), MaxPartitions: 1, Clock: clock})
	full.Acquire(bg, "held", 1)
	if err := full.Reset(bg, "other"); !errors.Is(err, partitioned.ErrNoPartition) {
		t.Fatalf("Reset with MaxPartitions busy: %v, want ErrNoPartition", err)
	}
	if st := full.Stats(); st.Refused != 0 {
		t.Fatalf("Reset counted as a refused request: %+v", st)
	}
}

func must(l memory.Limiter, err error) ratelimit.Limiter {
	if err != nil {
		panic(err)
	}
	return l
}
