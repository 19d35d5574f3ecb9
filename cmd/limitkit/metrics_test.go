package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// series returns the lines of GET /metrics that hold every one of labels.
func series(t *testing.T, base string, labels ...string) []string {
	t.Helper()
	res := do(t, http.MethodGet, base+"/metrics", "")
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /metrics: %s %v %s", res.Status, err, b)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		ok := !strings.HasPrefix(line, "#")
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// A deleted policy's series leave /metrics, its histograms' too; made
// again, it counts from zero. The other policies' series stay.
func TestMetricsOfDeletedPolicy(t *testing.T) {
	s, ts := newTestServer(t, options{})
	auth := []string{"Authorization", "Bearer " + testToken}
	const gone = `ratelimit_policy="gone"`
	create := func() {
		t.Helper()
		res := post(t, ts.URL+"/api/policies", `{"name":"gone","algorithm":"concurrency","concurrency":{"limit":2},"key":"user","apps":["web"]}`, auth...)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create: %s", res.Status)
		}
		// One lease granted and released: a request counted, a lease
		// duration recorded in a histogram.
		lease, err := s.reg.Acquire(context.Background(), "gone", "u", "web", 1)
		if err != nil || !lease.Acquired() {
			t.Fatalf("acquire: %v %v", lease, err)
		}
		lease.Release()
	}
	create()
	if _, err := s.reg.Acquire(context.Background(), "demo", "u", "demo", 1); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, ts.URL, "ratelimit_requests_total", gone, `ratelimit_result="acquired"`); got != "1" {
		t.Fatalf("acquired under gone: %s, want 1", got)
	}
	if len(series(t, ts.URL, "ratelimit_request_lease_duration_seconds_count", gone)) != 1 {
		t.Fatal("no lease duration for gone")
	}

	if res := do(t, http.MethodDelete, ts.URL+"/api/policies/gone", "", auth...); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %s", res.Status)
	}
	if left := series(t, ts.URL, gone); len(left) != 0 {
		t.Errorf("after the deletion /metrics still has %d series of gone:\n%s", len(left), strings.Join(left, "\n"))
	}
	if got := metric(t, ts.URL, "ratelimit_requests_total", `ratelimit_policy="demo"`, `ratelimit_result="acquired"`); got != "1" {
		t.Errorf("acquired under demo after gone's deletion: %s, want 1", got)
	}
	if len(series(t, ts.URL, "target_info")) != 1 {
		t.Error("target_info is not served once")
	}

	create()
	if got := metric(t, ts.URL, "ratelimit_requests_total", gone, `ratelimit_result="acquired"`); got != "1" {
		t.Errorf("acquired under gone made again: %s, want 1", got)
	}
	if got := metric(t, ts.URL, "ratelimit_request_lease_duration_seconds_count", gone); got != "1" {
		t.Errorf("lease durations under gone made again: %s, want 1", got)
	}
}
