package memory_test

import (
	"testing"
	"time"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// A Factory's limiter checks permits against the capacity of the
// configuration it last synced to, before syncing.
func TestReconfigureFactoryCapacity(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 5, Window: time.Second}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := f.New()
	if err := f.Reconfigure(fixedwindow.Config{Limit: 10, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	if lease, err := l.Acquire(bg, 8); err != nil || !lease.Acquired() {
		t.Errorf("Acquire(8) after the limit rose to 10: %v, %v", lease, err)
	}
	g := f.New()
	if lease, err := g.Wait(bg, 8); err != nil || !lease.Acquired() {
		t.Errorf("Wait(8) after the limit rose to 10: %v, %v", lease, err)
	}
}
