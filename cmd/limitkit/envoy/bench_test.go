package envoy

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/policy"
)

// BenchmarkShouldRateLimit measures ShouldRateLimit over gRPC on a loopback
// port, 64 calls in flight at once on one connection (as one Envoy sends
// them), against a redis-server of its own (and, for the ratio, on the
// memory backend): one descriptor value for every call, and 10,000 values
// in turn. It reports calls/s and the 99th percentile of a call's latency.
func BenchmarkShouldRateLimit(b *testing.B) {
	addr := redistest.Start(b).Addr
	client := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 128})
	b.Cleanup(func() { client.Close() })
	files := map[string]string{"d.yaml": "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 4000000000}\n"}
	backends := []struct {
		name string
		e    *env
	}{
		{"redis", start(b, files, Options{Backend: policy.Redis(client)})},
		{"memory", start(b, files, Options{Backend: policy.Memory()})},
	}
	const streams = 64
	for _, n := range []int{1, 10_000} {
		for _, be := range backends {
			b.Run(fmt.Sprintf("descriptors=%d/backend=%s", n, be.name), func(b *testing.B) { bench(b, be.e, n, streams) })
		}
	}
}

// bench runs b's calls on e, n descriptor values in turn, streams calls
// in flight.
func bench(b *testing.B, e *env, n, streams int) {
	reqs := make([]*rlspb.RateLimitRequest, n)
	run := strconv.FormatInt(time.Now().UnixNano(), 36) // keys of this run only
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", HitsAddend: 1,
			Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", run+"-"+strconv.Itoa(i))}}
	}
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism((streams + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			req := reqs[int(next.Add(1))%n]
			t0 := time.Now()
			resp, err := e.client.ShouldRateLimit(context.Background(), req)
			mine = append(mine, time.Since(t0))
			if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
				b.Errorf("%v %v", resp, err)
				return
			}
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	}
}
