package redis_test

import (
	"testing"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// TestContract runs the kit's contract checks, the ones any limiter must
// pass, against a Redis limiter of every algorithm on a real server and
// the real clock, with a queue of its capacity so that Wait waits. The
// algorithms run side by side: the checks mostly sleep.
func TestContract(t *testing.T) {
	newLimiter := factory(realClient(t))
	for _, a := range conformance.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			t.Parallel()
			err := ratelimittest.TestLimiter(func(c int64) ratelimit.Limiter {
				return newLimiter(t, a.Config(int(c), ratelimit.Queue{Limit: int(c)}), nil)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
