package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/quota"
)

// BenchmarkAcquire: a daily quota in Paris against a fixed window of a
// day, on memory, one goroutine: the calendar is computed once a period,
// so a decision costs what a fixed window's does.
func BenchmarkAcquire(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  ratelimit.Config
	}{
		{"quota", quota.Config{Limit: 1 << 50, Period: quota.Day, Timezone: "Europe/Paris"}},
		{"fixedwindow", fixedwindow.Config{Limit: 1 << 50, Window: 24 * time.Hour}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := memory.New(c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l.Acquire(ctx, 1)
			}
		})
	}
}
