package otel_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/redis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// The Prometheus names the README documents, one per instrument.
var prometheusNames = []string{
	"ratelimit_requests_total",
	"ratelimit_permits_total",
	"ratelimit_queued_requests",
	"ratelimit_request_time_in_queue_seconds_bucket",
	"ratelimit_active_request_leases",
	"ratelimit_request_lease_duration_seconds_bucket",
	"ratelimit_backend_duration_seconds_bucket",
	"ratelimit_backend_failures_total",
	"ratelimit_available_permits",
	"ratelimit_settled_permits_total",
}

// The handler of NewPrometheus serves every instrument under its
// documented name.
func TestPrometheus(t *testing.T) {
	reader, handler, err := limitotel.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ctx := context.Background()

	cfg := fixedwindow.Config{Limit: 1, Window: time.Hour}
	l := mustNew(t, mustMemory(t, cfg, newClock()), limitotel.WithMeterProvider(mp), limitotel.WithPolicy("api"), limitotel.WithConfig(cfg))
	l.Acquire(ctx, 1)
	l.Acquire(ctx, 1)
	cc := concurrency.Config{Limit: 1}
	inner := mustMemory(t, cc, newClock())
	c := mustNew(t, inner, limitotel.WithMeterProvider(mp), limitotel.WithPolicy("uploads"), limitotel.WithConfig(cc))
	first, _ := c.Acquire(ctx, 1)
	waiter := waitAsync(ctx, c, 1) // queued until first is released
	for inner.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	first.Release()
	a := <-waiter
	a.lease.Release()
	// The backend instruments: a Redis limiter on a server that is not there.
	r, err := redis.New(newClient(t, "127.0.0.1:1"), "k", cfg, redis.WithFailurePolicy(redis.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	rl := mustNew(t, r, limitotel.WithMeterProvider(mp), limitotel.WithPolicy("fleet"), limitotel.WithFailurePolicy(redis.FailClosed))
	rl.Acquire(ctx, 1)
	// A settlement: 5 reserved, 2 used.
	tc := fixedwindow.Config{Limit: 10, Window: time.Hour}
	tl := mustNew(t, mustMemory(t, tc, newClock()), limitotel.WithMeterProvider(mp), limitotel.WithPolicy("tokens"), limitotel.WithConfig(tc))
	if lease, err := control.Reserve(ctx, tl, 5); err != nil || control.Settle(ctx, tl, lease, 2) != nil {
		t.Fatalf("Reserve(5): %v, %v", lease, err)
	}

	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Result().Body)
	text := string(body)
	for _, name := range prometheusNames {
		if !strings.Contains(text, "\n"+name+"{") {
			t.Errorf("no %s in the Prometheus output", name)
		}
	}
	for _, series := range []string{
		`ratelimit_requests_total{otel_scope_name="github.com/limitkit/ratelimit/otel",otel_scope_schema_url="",otel_scope_version="",ratelimit_algorithm="fixedwindow",ratelimit_backend="memory",ratelimit_mode="enforce",ratelimit_policy="api",ratelimit_reason="limit",ratelimit_result="refused"} 1`,
		`ratelimit_backend_failures_total{otel_scope_name="github.com/limitkit/ratelimit/otel",otel_scope_schema_url="",otel_scope_version="",ratelimit_algorithm="unknown",ratelimit_backend="redis",ratelimit_failure_policy="closed",ratelimit_mode="enforce",ratelimit_policy="fleet"} 1`,
		`ratelimit_settled_permits_total{otel_scope_name="github.com/limitkit/ratelimit/otel",otel_scope_schema_url="",otel_scope_version="",ratelimit_algorithm="fixedwindow",ratelimit_backend="memory",ratelimit_mode="enforce",ratelimit_policy="tokens",ratelimit_settlement="returned"} 3`,
	} {
		if !strings.Contains(text, series) {
			t.Errorf("no series %s", series)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}
