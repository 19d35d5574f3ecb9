package partitioned_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// TestChainAndFromRatePartitionsAreEvicted: partitions whose limiters are a
// Chain and a FromRate are evicted once idle, so with MaxPartitions 2 a
// third key takes an idle one's place (it was refused for ever when only
// memory limiters could report idleness).
func TestChainAndFromRatePartitionsAreEvicted(t *testing.T) {
	clock := ratelimittest.NewClock()
	var closed atomic.Int64
	l := newPartitioned(t, partitioned.Config{
		MaxPartitions: 2, IdleTimeout: time.Hour, Clock: clock,
		New: func(key string) (ratelimit.Limiter, error) {
			if key == "xrate" {
				return ratelimit.FromRate(rate.NewLimiter(1e9, 1)), nil // refills in a nanosecond
			}
			m, err := memory.New(fixedwindow.Config{Limit: 1, Window: time.Second}, memory.WithClock(clock))
			if err != nil {
				return nil, err
			}
			return closer{ratelimit.Chain(m), &closed}, nil
		},
	})
	for _, key := range []string{"chain", "xrate"} {
		if lease, err := l.Acquire(bg, key, 1); err != nil || !lease.Acquired() {
			t.Fatalf("%s: %v %v", key, lease, err)
		}
	}
	clock.Advance(2 * time.Second) // the chain's window is over: initial again
	time.Sleep(time.Millisecond)   // and the FromRate bucket full again
	for _, key := range []string{"third", "fourth"} {
		if lease, err := l.Acquire(bg, key, 1); err != nil || !lease.Acquired() {
			t.Fatalf("%s at MaxPartitions with idle partitions: %v %v, want a partition", key, lease, err)
		}
	}
	if n := l.Stats().Evicted; n != 2 {
		t.Fatalf("%d partitions evicted, want 2", n)
	}
	if closed.Load() == 0 {
		t.Fatal("the evicted chain was not closed")
	}
}

// closer counts the Close calls of a chain, which is an Idler but not a
// Closer; it unwraps to the chain.
type closer struct {
	ratelimit.Limiter
	closed *atomic.Int64
}

func (c closer) Close() error { c.closed.Add(1); return nil }

func (c closer) Unwrap() ratelimit.Limiter { return c.Limiter }

// plain hides every method of a limiter but Acquire and Wait: it is not an
// Idler.
type plain struct {
	ratelimit.Limiter
	closed *atomic.Int64
}

func (p plain) Close() error { p.closed.Add(1); return nil }

// TestLimiterThatCannotBeEvictedIsRefused: a limiter that is not a
// Idler could never be evicted, so Config.New returning one
// creates no partition, and the limiter, made for it, is closed.
func TestLimiterThatCannotBeEvictedIsRefused(t *testing.T) {
	var closed atomic.Int64
	m, err := memory.New(fixedwindow.Config{Limit: 5, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l := newPartitioned(t, partitioned.Config{New: func(string) (ratelimit.Limiter, error) {
		return plain{struct{ ratelimit.Limiter }{m}, &closed}, nil
	}})
	_, err = l.Acquire(bg, "k", 1)
	if !errors.Is(err, partitioned.ErrNoPartition) || !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("a limiter that is not an Idler: %v, want ErrNoPartition and ErrInvalidConfig", err)
	}
	if closed.Load() != 1 || l.Stats().Live != 0 {
		t.Fatalf("closed %d times, %d partitions live; want the limiter closed once and no partition", closed.Load(), l.Stats().Live)
	}
	if s := m.Stats(); s.Granted != 0 {
		t.Fatalf("the refused partition's limiter granted %d", s.Granted)
	}
}

// TestSharedLimiterIsNeverClosed: one limiter behind Shared serves several
// keys: it counts across them, a refund reaches it, its partitions are
// evicted once it is idle (MaxPartitions 4), and neither eviction nor Close
// closes it. A shared limiter that is not an Idler is refused like any.
func TestSharedLimiterIsNeverClosed(t *testing.T) {
	clock := ratelimittest.NewClock()
	pool, err := memory.New(fixedwindow.Config{Limit: 3, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := partitioned.New(partitioned.Config{MaxPartitions: 4, IdleTimeout: time.Hour, Clock: clock,
		New: func(string) (ratelimit.Limiter, error) { return partitioned.Shared(pool), nil }})
	if err != nil {
		t.Fatal(err)
	}
	var leases []ratelimit.Lease
	for _, key := range []string{"vip1", "vip2", "vip3"} {
		lease, err := l.Acquire(bg, key, 1)
		if err != nil || !lease.Acquired() {
			t.Fatalf("%s: %v %v", key, lease, err)
		}
		leases = append(leases, lease)
	}
	if lease, err := l.Acquire(bg, "vip4", 1); err != nil || lease.Acquired() || lease.Reason() != ratelimit.ReasonLimit {
		t.Fatalf("a fourth permit of a shared limit of 3: %v %v, want refused by the limit", lease, err)
	}
	if err := l.Refund(bg, "vip3", leases[2], 1); err != nil {
		t.Fatal(err)
	}
	if lease, err := l.Acquire(bg, "vip4", 1); err != nil || !lease.Acquired() {
		t.Fatalf("after vip3's refund: %v %v, want the refunded permit", lease, err)
	}
	clock.Advance(2 * time.Second) // the pool's window is over: every partition idle
	if lease, err := l.Acquire(bg, "vip5", 1); err != nil || !lease.Acquired() || l.Stats().Evicted != 1 {
		t.Fatalf("vip5 at MaxPartitions with the pool idle: %v %v, %d evicted; want a partition in an evicted one's place", lease, err, l.Stats().Evicted)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if lease, err := pool.Acquire(context.Background(), 1); err != nil || !lease.Acquired() {
		t.Fatalf("the shared limiter after an eviction and Close: %v %v, want it open", lease, err)
	}
	var none ratelimit.Limiter
	if partitioned.Shared(nil) != nil || partitioned.Shared(none) != nil {
		t.Fatal("Shared of a nil limiter is not nil")
	}
	var closed atomic.Int64
	refusing := newPartitioned(t, partitioned.Config{New: func(string) (ratelimit.Limiter, error) {
		return partitioned.Shared(plain{struct{ ratelimit.Limiter }{pool}, &closed}), nil
	}})
	if _, err := refusing.Acquire(bg, "k", 1); !errors.Is(err, partitioned.ErrNoPartition) {
		t.Fatalf("Shared of a limiter that is not an Idler: %v, want ErrNoPartition", err)
	}
}

// TestChainOfForIsEvicted: a partition whose limiter chains another
// partitioned limiter's For with a global limit is evicted once both are
// idle (For reports its partition's idleness).
func TestChainOfForIsEvicted(t *testing.T) {
	clock := ratelimittest.NewClock()
	perIP := newPartitioned(t, partitioned.Config{Clock: clock,
		New: memoryOf(fixedwindow.Config{Limit: 1, Window: time.Second}, clock)})
	global, err := memory.New(fixedwindow.Config{Limit: 10, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer global.Close()
	l := newPartitioned(t, partitioned.Config{MaxPartitions: 1, IdleTimeout: time.Hour, Clock: clock,
		New: func(ip string) (ratelimit.Limiter, error) { return ratelimit.Chain(perIP.For(ip), global), nil }})
	if lease, err := l.Acquire(bg, "192.0.2.1", 1); err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	if lease, err := l.Acquire(bg, "192.0.2.2", 1); err != nil || lease.Reason() != ratelimit.ReasonNoPartition {
		t.Fatalf("a second key with the first one's windows running: %v %v, want ReasonNoPartition", lease, err)
	}
	clock.Advance(2 * time.Second)
	if lease, err := l.Acquire(bg, "192.0.2.2", 1); err != nil || !lease.Acquired() {
		t.Fatalf("a second key once the first one's windows are over: %v %v, want its partition", lease, err)
	}
}
