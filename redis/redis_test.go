package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keySeq atomic.Int64

// factory builds limiters on client, each under a fresh key, with the time
// pinned to the suite's clock, or Redis's own with a nil clock.
func factory(client goredis.UniversalClient, opts ...redis.Option) conformance.Factory {
	return func(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
		if clock != nil {
			opts = append(opts[:len(opts):len(opts)], redis.WithClock(clock))
		}
		l, err := redis.New(client, fmt.Sprintf("conformance-%d", keySeq.Add(1)), cfg, opts...)
		if err != nil {
			t.Fatalf("redis.New(%#v): %v", cfg, err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
}

func miniClient(t testing.TB) (*miniredis.Miniredis, *goredis.Client) {
	m := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return m, c
}

func realClient(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Standalone(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

func clusterClient(t testing.TB) *goredis.ClusterClient {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redistest.Cluster(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformanceMiniredis(t *testing.T) {
	t.Parallel() // in-process Lua: overlaps with the tests that wait on servers
	_, c := miniClient(t)
	conformance.Run(t, factory(c), conformance.Tick(time.Microsecond))
}

func TestConformanceRedis(t *testing.T) {
	conformance.Run(t, factory(realClient(t)), conformance.Tick(time.Microsecond))
}

func TestExtremesRedis(t *testing.T) {
	conformance.RunExtremes(t, factory(realClient(t)), conformance.Tick(time.Microsecond))
}

// TestRealClock: the bounds on Redis's own clock, 16 goroutines sharing a
// client (their decisions batched), and without coalescing.
func TestRealClock(t *testing.T) {
	c := realClient(t)
	t.Run("Coalesced", func(t *testing.T) { conformance.RunRealClock(t, factory(c)) })
	t.Run("WithoutCoalescing", func(t *testing.T) { conformance.RunRealClock(t, factory(c, redis.WithoutCoalescing())) })
}

// TestConformanceWithoutCoalescing: the suite, hammer included, with every
// decision its own script call (the other suites batch concurrent ones).
func TestConformanceWithoutCoalescing(t *testing.T) {
	conformance.Run(t, factory(realClient(t), redis.WithoutCoalescing()), conformance.Tick(time.Microsecond))
}

// TestConformanceCluster runs on the real 3-node cluster (a batch carries
// the keys of one hash slot, so of one node).
func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, factory(clusterClient(t)), conformance.Tick(time.Microsecond))
}

// TestConformanceRing runs on a go-redis Ring of two real servers (keys are
// sharded by their hash tag, so each limiter's keys stay together).
func TestConformanceRing(t *testing.T) {
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{
		"a": redistest.Start(t).Addr, "b": redistest.Start(t).Addr,
	}})
	t.Cleanup(func() { ring.Close() })
	conformance.Run(t, factory(ring), conformance.Tick(time.Microsecond))
}

// TestConformanceSentinel runs through a Sentinel-discovered master
// (go-redis FailoverClient, as a UniversalClient).
func TestConformanceSentinel(t *testing.T) {
	c := goredis.NewUniversalClient(&goredis.UniversalOptions{MasterName: "limitkit", Addrs: []string{redistest.Sentinel(t)}})
	t.Cleanup(func() { c.Close() })
	conformance.Run(t, factory(c), conformance.Tick(time.Microsecond))
}

// waitTimers returns once n timers are pending on clock: n goroutines
// asleep on it, say. It fails t after 5s.
func waitTimers(t testing.TB, clock *ratelimittest.Clock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clock.WaitForTimers(ctx, n); err != nil {
		t.Fatal(err)
	}
}
