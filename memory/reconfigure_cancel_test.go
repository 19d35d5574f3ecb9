package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// A cancelled Wait serves the queue under the configuration the limiter
// last synced to, not the current one (Factory limiters sync lazily).
func TestReconfigureThenCancelServesUnderNewConfig(t *testing.T) {
	clock := ratelimittest.NewClock()
	f, err := memory.NewFactory(concurrency.Config{Limit: 10}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	l := f.New()
	defer l.Close() // refuses w2
	mustAcquire(t, l, 6)
	ctx1, cancel1 := context.WithCancel(bg)
	w1 := goWait(t, l, ctx1, 5, 5) // 4 free: waits
	w2 := goWait(t, l, bg, 2, 7)   // behind w1 (OldestFirst)
	if err := f.Reconfigure(concurrency.Config{Limit: 6}); err != nil {
		t.Fatal(err)
	}
	cancel1()
	<-w1
	select {
	case a := <-w2:
		t.Errorf("w2 granted %v with 6 held and the limit now 6: 8 held (Stats %+v)", a.lease, l.Stats())
	case <-time.After(100 * time.Millisecond): // still waits: right
	}
}
