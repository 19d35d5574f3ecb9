package otel_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// benchConfig grants every call: the common path.
var benchConfig = tokenbucket.Config{Rate: 1e12, Burst: 1 << 40}

// benchLimiters returns a memory token bucket and another, recorded on an
// SDK MeterProvider.
func benchLimiters(b *testing.B) (plain, instrumented ratelimit.Limiter) {
	m := newMeter(b)
	p, err := memory.New(benchConfig)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	inner, err := memory.New(benchConfig)
	if err != nil {
		b.Fatal(err)
	}
	w, err := limitotel.New(inner, limitotel.WithMeterProvider(m), limitotel.WithConfig(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return p, w
}

func call(l ratelimit.Limiter, wait bool) func(context.Context, int) (ratelimit.Lease, error) {
	if wait {
		return l.Wait
	}
	return l.Acquire
}

// BenchmarkInstrumented: a memory token bucket's Acquire (and Wait), plain
// and recorded, in alternate rounds of one run (round=1/plain,
// round=1/instrumented, round=2/plain, ...). Recording an Acquire must
// cost at most 25 ns and allocate nothing; a recorded Wait granted at once
// allocates one ctx, which carries the hooks (README.md has the figures).
func BenchmarkInstrumented(b *testing.B) {
	ctx := context.Background()
	plain, instrumented := benchLimiters(b)
	for _, wait := range []bool{false, true} {
		name := "Acquire"
		if wait {
			name = "Wait"
		}
		for round := 1; round <= 3; round++ {
			for _, l := range []struct {
				name string
				l    ratelimit.Limiter
			}{{"plain", plain}, {"instrumented", instrumented}} {
				b.Run(fmt.Sprintf("%s/round=%d/%s", name, round, l.name), func(b *testing.B) {
					do := call(l.l, wait)
					b.ReportAllocs()
					for b.Loop() {
						if lease, err := do(ctx, 1); err != nil || !lease.Acquired() {
							b.Fatal(lease, err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkInstrumentedPaired runs batches of 64 plain and 64 recorded
// calls one after the other, so that both see the same machine, and reports
// the medians over the batches of the time of each per call and of their
// difference (overhead-ns/op): a batch that another process's work
// interrupted moves no median. ns/op is the time of a pair of batches.
func BenchmarkInstrumentedPaired(b *testing.B) {
	ctx := context.Background()
	for _, wait := range []bool{false, true} {
		name := "Acquire"
		if wait {
			name = "Wait"
		}
		b.Run(name, func(b *testing.B) {
			plain, instrumented := benchLimiters(b)
			p, in := call(plain, wait), call(instrumented, wait)
			const batch = 64
			tp := make([]float64, 0, 1<<16)
			ti := make([]float64, 0, 1<<16)
			diff := make([]float64, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				for range batch {
					p(ctx, 1)
				}
				t1 := time.Now()
				for range batch {
					in(ctx, 1)
				}
				t2 := time.Now()
				if len(tp) < cap(tp) {
					a, c := float64(t1.Sub(t0))/batch, float64(t2.Sub(t1))/batch
					tp, ti, diff = append(tp, a), append(ti, c), append(diff, c-a)
				}
			}
			b.ReportMetric(median(tp), "plain-ns/op")
			b.ReportMetric(median(ti), "instrumented-ns/op")
			b.ReportMetric(median(diff), "overhead-ns/op")
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}
