package partitioned_test

import (
	"testing"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// The kit's contract, WaitTraceReports included, holds for a partition's
// limiter (For) and a Shared limiter: the memory limiter each stands for
// tells its queueing to the Wait's ctx.
func TestContractWrappers(t *testing.T) {
	newMemory := func(c int64) memory.Limiter {
		l, err := memory.New(tokenbucket.Config{Rate: rate.Limit(2 * c), Burst: int(c), Queue: ratelimit.Queue{Limit: int(c)}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for name, newLimiter := range map[string]func(c int64) ratelimit.Limiter{
		"For": func(c int64) ratelimit.Limiter {
			p := newPartitioned(t, partitioned.Config{
				New: func(string) (ratelimit.Limiter, error) { return newMemory(c), nil },
			})
			return p.For("k")
		},
		"Shared": func(c int64) ratelimit.Limiter {
			l := newMemory(c)
			t.Cleanup(func() { l.Close() })
			return partitioned.Shared(l)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := ratelimittest.TestLimiter(newLimiter); err != nil {
				t.Fatal(err)
			}
		})
	}
}
