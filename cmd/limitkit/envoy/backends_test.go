package envoy

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/policy"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// A descriptor that names a policy of the server's store is decided by
// that policy's algorithm: every answer is the one a limiter of the same
// configuration gives, on the same clock.
func TestPolicyAttached(t *testing.T) {
	clk := ratelimittest.NewClock()
	ctx := context.Background()
	store := policy.NewMemoryStore()
	tb := tokenbucket.Config{Rate: 2, Burst: 3}
	for _, p := range []policy.Policy{
		{Name: "bucket", Config: tb, Key: "user", Apps: []string{App}},
		{Name: "inflight", Config: concurrency.Config{Limit: 2}, Key: "user", Apps: []string{App}},
		{Name: "web-only", Config: tb, Key: "user", Apps: []string{"web"}},
	} {
		if _, err := store.Create(ctx, p, "test"); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := policy.NewRegistry(ctx, store, policy.Options{Backend: policy.Memory(memory.WithClock(clk))})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	e := start(t, map[string]string{"d.yaml": `domain: d
descriptors:
  - key: user
    policy: bucket
  - key: conc
    policy: inflight
  - key: conc
    value: closed
    policy: inflight
    failure_mode: closed
  - key: gone
    policy: deleted
    failure_mode: open
  - key: web
    policy: web-only
    failure_mode: closed
`}, Options{Backend: policy.Memory(memory.WithClock(clk)), Now: clk.Now, Policies: reg})

	direct, err := memory.New(tb, memory.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	for i, s := range []struct {
		hits    uint64
		advance time.Duration
	}{{1, 0}, {1, 0}, {1, 0}, {1, 0}, {2, 500 * time.Millisecond}, {1, 250 * time.Millisecond}, {3, time.Second}, {0, 0}, {1, 100 * time.Millisecond}} {
		clk.Advance(s.advance)
		d := desc("user", "alice")
		d.HitsAddend = wrapperspb.UInt64(s.hits)
		st := e.call(t, "d", 1, d).Statuses[0]
		lease, err := direct.Acquire(ctx, int(s.hits))
		if err != nil {
			t.Fatal(err)
		}
		wantCode := rlspb.RateLimitResponse_OK
		if !lease.Acquired() {
			wantCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if st.Code != wantCode || st.CurrentLimit.GetRequestsPerUnit() != uint32(lease.Limit()) || st.CurrentLimit.GetName() != "bucket" {
			t.Fatalf("step %d: %v limit %v; the token bucket: granted %v, limit %d", i, st.Code, st.CurrentLimit, lease.Acquired(), lease.Limit())
		}
		wantRemaining, wantReset := uint32(lease.Remaining()), lease.ResetAfter()
		if !lease.Acquired() {
			wantRemaining = 0
			wantReset, _ = lease.RetryAfter()
		}
		if st.LimitRemaining != wantRemaining || st.DurationUntilReset.GetSeconds() != max(check.CeilSeconds(wantReset), 1) {
			t.Fatalf("step %d: remaining %d reset %ds; the token bucket: %d, %v", i, st.LimitRemaining, st.DurationUntilReset.GetSeconds(), wantRemaining, wantReset)
		}
	}

	// A concurrency limit cannot be released through Envoy's protocol.
	if _, err := e.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("conc", "x")}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("concurrency policy: %v", err)
	}
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	if st := e.call(t, "d", 1, desc("conc", "closed")).Statuses[0]; st.Code != over {
		t.Fatalf("concurrency policy, failure_mode closed: %v", st)
	}
	if st := e.call(t, "d", 1, desc("gone", "x")).Statuses[0]; st.Code != ok {
		t.Fatalf("unknown policy, failure_mode open: %v", st)
	}
	if st := e.call(t, "d", 1, desc("web", "x")).Statuses[0]; st.Code != over {
		t.Fatalf("policy that does not allow envoy, failure_mode closed: %v", st)
	}
}

// On Redis, every replica counts in the same windows.
func TestRedisReplicasShare(t *testing.T) {
	addr := redistest.Standalone(t)
	files := map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 10}\n"}
	var replicas []*env
	for i := 0; i < 2; i++ {
		client := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { client.Close() })
		replicas = append(replicas, start(t, files, Options{Backend: policy.Redis(client)}))
	}
	key := "shared-" + time.Now().Format(time.RFC3339Nano) // a key of this run only
	oks := 0
	for i := 0; i < 16; i++ {
		resp := replicas[i%2].call(t, "d", 1, desc("k", key))
		if resp.OverallCode == rlspb.RateLimitResponse_OK {
			oks++
		}
	}
	if oks != 10 {
		t.Fatalf("%d of 16 calls OK across two replicas under a limit of 10", oks)
	}
}

// failure_mode says what a descriptor answers when Redis fails.
func TestFailureModes(t *testing.T) {
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { client.Close() })
	e := start(t, map[string]string{"d.yaml": `domain: d
descriptors:
  - key: err
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: open
    failure_mode: open
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: closed
    failure_mode: closed
    rate_limit: {unit: hour, requests_per_unit: 5}
`}, Options{Backend: policy.Redis(client)})
	wantStatus(t, e.call(t, "d", 1, desc("err", "x")).Statuses[0], rlspb.RateLimitResponse_OK, 5, hour, 4)
	mr.Close()
	if _, err := e.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("err", "x")}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Redis down, failure_mode error: %v", err)
	}
	if st := e.call(t, "d", 1, desc("open", "x")).Statuses[0]; st.Code != rlspb.RateLimitResponse_OK {
		t.Fatalf("Redis down, failure_mode open: %v", st)
	}
	if resp := e.call(t, "d", 1, desc("closed", "x")); resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("Redis down, failure_mode closed: %v", resp)
	}
}
