package memory_test

import (
	"context"
	"testing"

	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/memory"
)

// BenchmarkSettle: a reservation and its settlement (giving back, or
// charging), against a plain Acquire of the same permits, on every rate
// configuration; every call is a grant.
func BenchmarkSettle(b *testing.B) {
	ctx := context.Background()
	for _, c := range benchConfigs[:len(benchConfigs)-1] { // concurrency does not settle
		l, _ := memory.New(c.cfg)
		b.Run(c.name+"/acquire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if lease, _ := l.Acquire(ctx, 2); !lease.Acquired() {
					b.Fatal("refused")
				}
			}
		})
		b.Run(c.name+"/reserve+settle", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				lease, _ := control.Reserve(ctx, l, 2)
				if err := control.Settle(ctx, l, lease, 1+i%3); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		l.Close()
	}
}
