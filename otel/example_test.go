package otel_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/shadow"
)

// A limit of 2 requests per hour, recorded on an SDK MeterProvider: three
// requests make two grants and one refusal.
func ExampleNew() {
	reader := sdkmetric.NewManualReader() // in production: a periodic reader with an exporter
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	cfg := fixedwindow.Config{Limit: 2, Window: time.Hour}
	limit, err := memory.New(cfg)
	if err != nil {
		panic(err)
	}
	limiter, err := limitotel.New(limit,
		limitotel.WithMeterProvider(provider),
		limitotel.WithPolicy("api"),
		limitotel.WithConfig(cfg))
	if err != nil {
		panic(err)
	}
	defer limiter.Close() // closes limit too

	for i := 0; i < 3; i++ {
		limiter.Acquire(context.Background(), 1)
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != limitotel.RequestsName {
			continue
		}
		var lines []string
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			result, _ := p.Attributes.Value(limitotel.ResultKey)
			line := fmt.Sprintf("%s %s result=%s", m.Name, m.Unit, result.Emit())
			if reason, ok := p.Attributes.Value(limitotel.ReasonKey); ok {
				line += " reason=" + reason.Emit()
			}
			lines = append(lines, fmt.Sprintf("%s: %d", line, p.Value))
		}
		fmt.Println(strings.Join(sorted(lines), "\n"))
	}
	// Output:
	// ratelimit.requests {request} result=acquired: 2
	// ratelimit.requests {request} result=refused reason=limit: 1
}

// A new per-user limit runs in shadow mode: every request is served, and
// the refusals it would make are counted under ratelimit.mode "shadow".
func ExampleShadow() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	cfg := fixedwindow.Config{Limit: 1, Window: time.Hour}
	perUser, err := memory.NewFactory(cfg)
	if err != nil {
		panic(err)
	}
	rec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(provider),
		limitotel.WithPolicy("per-user-v2"), limitotel.WithConfig(cfg), limitotel.WithShadow())
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	users, err := partitioned.New(partitioned.Config{
		New: func(user string) (ratelimit.Limiter, error) {
			return shadow.New(rec.Wrap(perUser.New()), nil), nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer users.Close()

	for _, user := range []string{"ann", "ann", "bob", "ann"} {
		lease, _ := users.Acquire(context.Background(), user, 1)
		fmt.Println(user, lease.Acquired())
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == limitotel.RequestsName {
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if p.Attributes.HasValue(limitotel.ReasonKey) {
					mode, _ := p.Attributes.Value(limitotel.ModeKey)
					fmt.Println("would refuse:", p.Value, "mode:", mode.Emit())
				}
			}
		}
	}
	// Output:
	// ann true
	// ann true
	// bob true
	// ann true
	// would refuse: 2 mode: shadow
}

// The handler of NewPrometheus serves a MeterProvider's metrics on /metrics.
func ExampleNewPrometheus() {
	reader, handler, err := limitotel.NewPrometheus()
	if err != nil {
		panic(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	limit, _ := memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour})
	limiter, _ := limitotel.New(limit, limitotel.WithMeterProvider(provider), limitotel.WithPolicy("api"))
	defer limiter.Close()
	limiter.Acquire(context.Background(), 1)

	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "ratelimit_permits_total{") {
			fmt.Println(line[:len("ratelimit_permits_total")], line[strings.LastIndexByte(line, ' ')+1:])
		}
	}
	// Output:
	// ratelimit_permits_total 1
}

func sorted(lines []string) []string {
	slices.Sort(lines)
	return lines
}
