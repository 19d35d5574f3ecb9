package otel

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// NewPrometheus returns a reader for an SDK MeterProvider
// (sdkmetric.WithReader) and an http.Handler that serves, in the Prometheus
// text format, what that reader collects at each request: a server's
// /metrics. The metrics are registered on a registry of their own, not on
// Prometheus's default one. Names follow the OpenTelemetry Prometheus
// exporter: dots become underscores, counters end in _total and histograms
// in seconds in _seconds (ratelimit_requests_total,
// ratelimit_request_time_in_queue_seconds_bucket; the README lists them).
//
//	reader, handler, err := otel.NewPrometheus()
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	mux.Handle("GET /metrics", handler)
func NewPrometheus() (sdkmetric.Reader, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("otel: Prometheus exporter: %w", err)
	}
	return exp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
