package memory_test

import (
	"testing"
	"time"

	"github.com/limitkit/ratelimit/internal/conformance"
)

// TestSettle runs the settlement scenarios on the fake clock (limiters
// made by New: those of one Factory share their grants' outcome, so one
// would take a sibling's lease as its own, which BadCalls checks it does
// not).
func TestSettle(t *testing.T) { conformance.RunSettle(t, factory) }

// TestSettleRealClock: settlements racing decisions on the real clock keep
// each algorithm's bound.
func TestSettleRealClock(t *testing.T) {
	t.Run("New", func(t *testing.T) { conformance.RunSettleRealClock(t, factory, 100*time.Millisecond) })
	t.Run("Factory", func(t *testing.T) { conformance.RunSettleRealClock(t, fromFactory, 100*time.Millisecond) })
}
