package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/policy"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/shadow"
)

// waitQueued waits, for 5s at the most, until ratelimit.queued_requests
// reads n: a Wait is counted just after it can be seen waiting (in a
// memory limiter's Stats, or by the timer it arms).
func waitQueued(t *testing.T, m *meter, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if value(m.collect(t), queued) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never read %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkSum checks the sum, in seconds, of the histogram points of name
// whose attributes hold every "key=value" of kv: in [lo, hi].
func checkSum(t *testing.T, points map[string][]point, name string, lo, hi float64, kv ...string) {
	t.Helper()
	var sum float64
	for _, p := range points[name] {
		if matches(p.attrs, kv) {
			sum += p.sum
		}
	}
	if sum < lo || sum > hi {
		t.Errorf("%s%v: sum %v s, want it in [%v, %v] s", name, kv, sum, lo, hi)
	}
}

// A queued Wait's time in the queue is recorded with the Wait's ctx: the
// SDK keeps the trace of the request that waited as an exemplar.
func TestTimeInQueueExemplar(t *testing.T) {
	m := newMeter(t)
	cfg := concurrency.Config{Limit: 1}
	l := mustNew(t, mustMemory(t, cfg, newClock()), limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	first, err := l.Acquire(ctx, 1)
	if err != nil || !first.Acquired() {
		t.Fatal(first, err)
	}
	waiter := waitAsync(ctx, l, 1)
	waitQueued(t, m, 1)
	first.Release()
	a := <-waiter
	if a.err != nil || !a.lease.Acquired() {
		t.Fatal(a.lease, a.err)
	}
	a.lease.Release()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != inQueue {
				continue
			}
			for _, p := range mt.Data.(metricdata.Histogram[float64]).DataPoints {
				for _, e := range p.Exemplars {
					found = found || trace.TraceID(e.TraceID) == sc.TraceID()
				}
			}
		}
	}
	if !found {
		t.Errorf("no exemplar of the waiting request's trace on %s", inQueue)
	}
}

// A shadow limiter's Wait never queues: recorded, it counts nothing in the
// queue instruments, its refusal (granted in shadow) included.
func TestShadowWaitNotQueued(t *testing.T) {
	m := newMeter(t)
	cfg := concurrency.Config{Limit: 1}
	l := mustNew(t, shadow.New(mustMemory(t, cfg, newClock()), nil), limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	ctx := context.Background()
	for range 2 { // the second would wait, were it not in shadow mode
		if lease, err := l.Wait(ctx, 1); err != nil || !lease.Acquired() {
			t.Fatal(lease, err)
		}
	}
	check(t, m.collect(t), []want{{inQueue, nil, 0}, {queued, nil, 0}, {requests, []string{"ratelimit.result=acquired"}, 2}})
}

// A recorded partitioned limiter (WrapKeyed) counts only the Waits its
// partitions queue.
func TestKeyedWaitQueued(t *testing.T) {
	m := newMeter(t)
	cfg := concurrency.Config{Limit: 1}
	clock := newClock()
	p, err := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) { return mustMemory(t, cfg, clock), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	k := limitotel.WrapKeyed(rec, p)
	defer k.Close()
	waitBehind(t, m, func() (ratelimit.Lease, error) { return k.Wait(context.Background(), "a", 1) })
	check(t, m.collect(t), []want{{requests, []string{"ratelimit.result=acquired"}, 2}})
}

// waitBehind calls wait, a Wait for the one permit of a concurrency limit,
// twice: the first is granted at once, and is not counted in the queue
// instruments; the second queues until the first is released, and is.
func waitBehind(t *testing.T, m *meter, wait func() (ratelimit.Lease, error)) {
	t.Helper()
	first, err := wait()
	if err != nil || !first.Acquired() {
		t.Fatal(first, err)
	}
	check(t, m.collect(t), []want{{inQueue, nil, 0}, {queued, nil, 0}})
	waiter := make(chan ratelimit.Lease, 1)
	go func() { lease, _ := wait(); waiter <- lease }()
	waitQueued(t, m, 1)
	first.Release()
	if lease := <-waiter; !lease.Acquired() {
		t.Fatal(lease)
	} else {
		lease.Release()
	}
	check(t, m.collect(t), []want{{inQueue, nil, 1}, {queued, nil, 0}})
}

// A recorded policy (WrapKeyed of a policy.Keyed) counts only the Waits
// that queue, and reports the policy's configuration as it is now
// (httplimit.Configured), for the HTTP middleware's fields.
func TestKeyedPolicy(t *testing.T) {
	ctx := context.Background()
	store := policy.NewMemoryStore()
	cfg := concurrency.Config{Limit: 1}
	if _, err := store.Create(ctx, policy.Policy{Name: "p", Config: cfg, Key: "user", Apps: []string{"*"}}, "test"); err != nil {
		t.Fatal(err)
	}
	reg, err := policy.NewRegistry(ctx, store, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	m := newMeter(t)
	rec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	k := limitotel.WrapKeyed(rec, reg.Keyed("p", "web"))
	var _ httplimit.Configured = k
	if got := k.Config(); got != ratelimit.Config(cfg) {
		t.Errorf("Config() = %v, want %v", got, cfg)
	}
	waitBehind(t, m, func() (ratelimit.Lease, error) { return k.Wait(ctx, "u", 1) })
}

// A recorded limiter tells the hooks already on a Wait's ctx too, so that a
// limiter over it learns of the Waits that queue: the kit's contract holds
// for it, a concurrency limit's (whose leases it wraps) included.
func TestRecordedContract(t *testing.T) {
	m := newMeter(t)
	for _, a := range conformance.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			t.Parallel()
			err := ratelimittest.TestLimiter(func(c int64) ratelimit.Limiter {
				cfg := a.Config(int(c), ratelimit.Queue{Limit: int(c)})
				inner, err := memory.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				l, err := limitotel.New(inner, limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg), limitotel.WithPolicy(a.Name))
				if err != nil {
					t.Fatal(err)
				}
				return l
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
