package ratelimit_test

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestContract runs the kit's contract checks, the ones any limiter must
// pass, against FromRate and against Chains (of a rate limit and a
// concurrency limit, so that a Chain's Wait both sleeps and queues).
func TestContract(t *testing.T) {
	mustMemory := func(cfg ratelimit.Config) memory.Limiter {
		l, err := memory.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for name, newLimiter := range map[string]func(c int64) ratelimit.Limiter{
		"FromRate": func(c int64) ratelimit.Limiter {
			return ratelimit.FromRate(rate.NewLimiter(rate.Every(time.Second/time.Duration(c)), int(c)))
		},
		"Chain/rate-first": func(c int64) ratelimit.Limiter {
			return ratelimit.Chain(mustMemory(tokenbucket.Config{Rate: rate.Limit(c), Burst: int(c)}),
				mustMemory(tokenbucket.Config{Rate: rate.Limit(2 * c), Burst: int(2 * c)}))
		},
		"Chain/concurrency-last": func(c int64) ratelimit.Limiter {
			return ratelimit.Chain(mustMemory(tokenbucket.Config{Rate: rate.Limit(100 * c), Burst: int(100 * c)}),
				mustMemory(concurrency.Config{Limit: int(c)}))
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
