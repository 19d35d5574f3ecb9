package conformance

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/held"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// RealClockCase is a configuration the real-clock check runs, and the most
// permits its algorithm may grant within any span of time.
type RealClockCase struct {
	Name   string
	Config ratelimit.Config
	// MaxIn is the most permits grantable in any closed span of length d;
	// nil for concurrency, whose bound is on permits held at once.
	MaxIn func(d time.Duration) int64
}

// RealClockCases returns the configurations RunRealClock checks: windows of
// tens of milliseconds, so that a run of a few hundred milliseconds spans
// many of them, and a token bucket fast enough that goroutines outrun it.
func RealClockCases() []RealClockCase {
	const limit, w = 50, 20 * time.Millisecond
	windows := func(d time.Duration) int64 { return int64(d / w) } // whole windows in d
	return []RealClockCase{
		{"tokenbucket", tokenbucket.Config{Rate: 50_000, Burst: limit}, func(d time.Duration) int64 {
			// The 1ns of a grant's rule: it is granted within 1ns of refill.
			return limit + int64(50_000*(d+time.Nanosecond).Seconds())
		}},
		{"tokenbucket-interval", tokenbucket.Config{Period: 5 * time.Millisecond, PerPeriod: 10, Burst: limit}, func(d time.Duration) int64 {
			return limit + 10*(int64(d/(5*time.Millisecond))+1) // refill instants in a closed span
		}},
		// A span touches at most windows(d)+2 aligned windows.
		{"fixedwindow", fixedwindow.Config{Limit: limit, Window: w}, func(d time.Duration) int64 { return limit * (windows(d) + 2) }},
		// The weighted counter counts its current window in full: at most
		// Limit per aligned window, like a fixed window.
		{"slidingwindow-weighted", slidingwindow.Config{Limit: limit, Window: w}, func(d time.Duration) int64 { return limit * (windows(d) + 2) }},
		// Limit in any span shorter than Window less one segment.
		{"slidingwindow-segmented", slidingwindow.Config{Limit: limit, Window: w, Segments: 4}, func(d time.Duration) int64 {
			return limit * (int64(d/(w-w/4)) + 1)
		}},
		// Limit in any span shorter than Window.
		{"slidinglog", slidinglog.Config{Limit: limit, Window: w}, func(d time.Duration) int64 { return limit * (windows(d) + 1) }},
		{"concurrency", concurrency.Config{Limit: 4}, nil},
	}
}

// realGrant is a grant on the real clock: its decision fell between the
// two readings around the call.
type realGrant struct {
	before, after time.Time
	permits       int64
}

// RunRealClock checks the algorithms' bounds on the production path: the
// limiter that f builds for each RealClockCase with a nil clock (the real
// one) is hammered by 16 goroutines for 300ms, and every span of the run
// must hold at most MaxIn permits. A grant's instant is known only to lie
// between the readings taken before and after its call, so a span counts
// the grants whose calls lie wholly inside it: a sound check, with no
// timing assertion. Concurrency limiters must never have more than their
// limit held. It counts; it never asserts a duration.
func RunRealClock(t *testing.T, f Factory) {
	for _, c := range RealClockCases() {
		c := c
		t.Run(c.Name, func(t *testing.T) {
			l := f(t, c.Config, nil)
			if c.MaxIn == nil {
				checkHeld(t, l, c.Config.Capacity())
				return
			}
			grants := hammer(t, l)
			if len(grants) == 0 {
				t.Fatalf("no grant in the run")
			}
			if err := checkSpans(grants, c.MaxIn); err != nil {
				t.Fatalf("%v (%d grants)", err, len(grants))
			}
		})
	}
}

const realWorkers, realRun = 16, 300 * time.Millisecond

// hammer runs the workers and returns the grants, ordered by before.
func hammer(t *testing.T, l ratelimit.Limiter) []realGrant {
	var mu sync.Mutex
	var all []realGrant
	var wg sync.WaitGroup
	stop := time.Now().Add(realRun)
	for w := 0; w < realWorkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []realGrant
			for i := 0; time.Now().Before(stop) && i < 1_000_000; i++ {
				p := int64(1 + (w+i)%3)
				before := time.Now()
				lease, err := l.Acquire(context.Background(), int(p))
				after := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				if lease.Acquired() {
					mine = append(mine, realGrant{before, after, p})
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].before.Before(all[j].before) })
	return all
}

// checkSpans checks, from up to 512 starting grants spread over the run,
// every span that starts at a grant's before and ends at the latest after
// of the grants counted: their permits must fit in maxIn of its length.
func checkSpans(g []realGrant, maxIn func(time.Duration) int64) error {
	stride := max(1, len(g)/512)
	for i := 0; i < len(g); i += stride {
		var sum int64
		end := g[i].after
		for j := i; j < len(g); j++ {
			sum += g[j].permits
			if g[j].after.After(end) {
				end = g[j].after
			}
			if d := end.Sub(g[i].before); sum > maxIn(d) {
				return fmt.Errorf("%d permits granted within %v (grants %d to %d), more than the bound %d", sum, d, i, j, maxIn(d))
			}
		}
	}
	return nil
}

// checkHeld has the workers take and release permits, counting those held
// between each grant's return and its release: never more than limit.
func checkHeld(t *testing.T, l ratelimit.Limiter, limit int64) {
	if err := held.Within(l, limit, realWorkers, realRun, 0); err != nil {
		t.Fatal(err)
	}
}
