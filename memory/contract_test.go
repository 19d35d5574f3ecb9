package memory_test

import (
	"testing"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// TestContract runs the kit's contract checks, the ones any limiter must
// pass, against a memory limiter of every algorithm, with a queue of its
// capacity so that Wait waits.
func TestContract(t *testing.T) {
	for _, a := range conformance.Algorithms() {
		a := a
		t.Run(a.Name, func(t *testing.T) {
			t.Parallel()
			err := ratelimittest.TestLimiter(func(c int64) ratelimit.Limiter {
				cfg := a.Config(int(c), ratelimit.Queue{Limit: int(c)})
				l, err := memory.New(cfg)
				if err != nil {
					t.Fatalf("memory.New(%#v): %v", cfg, err)
				}
				return l
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
