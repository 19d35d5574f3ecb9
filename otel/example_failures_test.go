package otel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/limitkit/ratelimit/fixedwindow"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/redis"
)

// A Redis limiter that fails open grants while Redis is down; given the
// Recorder's CountRedisFailures, those grants are counted as failures.
func ExampleRecorder_CountRedisFailures() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	server, err := miniredis.Run() // a Redis server of the example's own
	if err != nil {
		panic(err)
	}
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), MaxRetries: -1})
	defer client.Close()

	cfg := fixedwindow.Config{Limit: 100, Window: time.Minute}
	rec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(provider), limitotel.WithPolicy("api"),
		limitotel.WithConfig(cfg), limitotel.WithBackend("redis"), limitotel.WithFailurePolicy(redis.FailOpen))
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	limit, err := redis.New(client, "api", cfg,
		redis.WithFailurePolicy(redis.FailOpen), redis.WithOnFailure(rec.CountRedisFailures()))
	if err != nil {
		panic(err)
	}
	limiter := rec.Wrap(limit)
	defer limiter.Close()

	server.Close() // Redis goes away
	lease, _ := limiter.Acquire(context.Background(), 1)
	fmt.Println("granted:", lease.Acquired())

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == limitotel.BackendFailuresName {
			fmt.Println(m.Name+":", m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	// Output:
	// granted: true
	// ratelimit.backend.failures: 1
}
