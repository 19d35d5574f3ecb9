package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
	l, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatalf("memory.New(%#v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestConformance(t *testing.T) { ratelimittest.Run(t, factory) }

func TestQueueConformance(t *testing.T) { ratelimittest.RunQueue(t, factory) }
