// Package held checks, on the real clock, that a limiter whose permits are
// held until released never has more held at once than its limit: what
// ratelimittest.TestLimiter and the backends' conformance suite share.
package held

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
)

// Within has workers goroutines take 1 or 2 permits of l, hold them
// for hold and release them, for run, counting the permits held between
// each grant's return and its release: an error when that ever exceeds
// limit, when nothing was granted, or when a call failed.
func Within(l ratelimit.Limiter, limit int64, workers int, run, hold time.Duration) error {
	var held, most, grants atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(stop) && i < 1_000_000; i++ {
				p := int64(1 + (w+i)%2)
				lease, err := l.Acquire(context.Background(), int(p))
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("Acquire(%d): %w", p, err))
					mu.Unlock()
					return
				}
				if !lease.Acquired() {
					continue
				}
				grants.Add(1)
				n := held.Add(p)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if hold > 0 {
					time.Sleep(hold) // held a while, for others to overlap
				}
				held.Add(-p)
				lease.Release()
			}
		}(w)
	}
	wg.Wait()
	if grants.Load() == 0 {
		errs = append(errs, fmt.Errorf("no grant in %v of take and release", run))
	}
	if m := most.Load(); m > limit {
		errs = append(errs, fmt.Errorf("%d permits held at once, limit %d", m, limit))
	}
	return errors.Join(errs...)
}
