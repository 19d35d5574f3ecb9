// Package conformance is the suite the module's backends share: the same
// scenarios run against limiters of limitkit's algorithms built by a
// Factory on a fake clock (ratelimittest.Clock). The memory and redis
// backends both pass them, which is what makes their decisions
// interchangeable. (ratelimittest.TestLimiter is the kit for a limiter of
// one's own.)
//
// Run covers Acquire: exact grant/refuse sequences per algorithm, exact
// RetryAfter, Remaining and ResetAfter, status checks, argument errors, the
// algorithms' bounds under random traffic, and a race hammer. RunQueue covers
// Wait, queueing and lifecycle for limiters with memory's queue semantics.
// RunExtremes runs the extreme configurations Validate accepts, and
// RunRealClock the bounds on the real clock.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// Factory builds the limiter under test for cfg, reading time from clock,
// or from the real clock when clock is nil (RunRealClock). It registers any
// cleanup (such as Close) with t.
type Factory func(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter

// Grant is one granted request, for the bound checks.
type Grant struct {
	At      time.Time
	Permits int64
}

// Algorithm is one algorithm configuration the suite exercises.
type Algorithm struct {
	Name string
	// Config returns the algorithm's config with capacity limit and queue q.
	Config func(limit int, q ratelimit.Queue) ratelimit.Config
	// Rate is true when permits come back with time, false when they come
	// back on Release (concurrency).
	Rate bool
	// Reserves is true when Wait reserves permits ahead of time (token
	// bucket): waiters are then served in arrival order whatever the
	// QueueOrder, which only decides who is evicted.
	Reserves bool
	// Refill is how long after taking all permits at once they are all back.
	Refill time.Duration
	// Bound reports a violation of the algorithm's admission bound in grants
	// (in time order) for capacity limit; nil for concurrency.
	Bound func(limit int64, grants []Grant) error
}

// Algorithms returns the configurations the suite runs: both token bucket
// refills, fixed window, both sliding windows, sliding log and concurrency.
func Algorithms() []Algorithm {
	return []Algorithm{
		{
			Name: "tokenbucket", Rate: true, Reserves: true, Refill: time.Second,
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return tokenbucket.Config{Rate: rate.Limit(l), Burst: l, Queue: q}
			},
			Bound: func(limit int64, g []Grant) error {
				return pairs(g, func(a, b Grant, sum int64) bool {
					return float64(sum) <= float64(limit)+float64(limit)*b.At.Sub(a.At).Seconds()+1e-6
				})
			},
		},
		{
			Name: "tokenbucket-interval", Rate: true, Reserves: true, Refill: time.Second,
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return tokenbucket.Config{Period: 250 * time.Millisecond, PerPeriod: (l + 3) / 4, Burst: l, Queue: q}
			},
			Bound: func(limit int64, g []Grant) error {
				per := (limit + 3) / 4
				return pairs(g, func(a, b Grant, sum int64) bool {
					ticks := b.At.Truncate(250*time.Millisecond).Sub(a.At.Truncate(250*time.Millisecond)) / (250 * time.Millisecond)
					return sum <= limit+per*int64(ticks)
				})
			},
		},
		{
			Name: "fixedwindow", Rate: true, Refill: time.Second,
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return fixedwindow.Config{Limit: l, Window: time.Second, Queue: q}
			},
			Bound: alignedBound(time.Second),
		},
		{
			Name: "slidingwindow-segmented", Rate: true, Refill: time.Second,
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return slidingwindow.Config{Limit: l, Window: time.Second, Segments: 4, Queue: q}
			},
			Bound: func(limit int64, g []Grant) error {
				// Every window of 4 segments ending at a grant's segment.
				return pairs(g, func(a, b Grant, sum int64) bool {
					from := b.At.Truncate(250 * time.Millisecond).Add(-750 * time.Millisecond)
					return a.At.Before(from) || sum <= limit
				})
			},
		},
		{
			Name: "slidingwindow-weighted", Rate: true, Refill: 2 * time.Second,
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return slidingwindow.Config{Limit: l, Window: time.Second, Queue: q}
			},
			Bound: alignedBound(time.Second),
		},
		{
			Name: "slidinglog", Rate: true, Refill: time.Second,
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return slidinglog.Config{Limit: l, Window: time.Second, Queue: q}
			},
			Bound: func(limit int64, g []Grant) error {
				return pairs(g, func(a, b Grant, sum int64) bool {
					return b.At.Sub(a.At) >= time.Second || sum <= limit
				})
			},
		},
		{
			Name: "concurrency",
			Config: func(l int, q ratelimit.Queue) ratelimit.Config {
				return concurrency.Config{Limit: l, Queue: q}
			},
		},
	}
}

// pairs checks ok for every pair of grants a <= b with the permits from a to b.
func pairs(g []Grant, ok func(a, b Grant, sum int64) bool) error {
	for i := range g {
		var sum int64
		for j := i; j < len(g); j++ {
			sum += g[j].Permits
			if !ok(g[i], g[j], sum) {
				return fmt.Errorf("%d permits granted from %v to %v", sum, g[i].At.Sub(ratelimittest.Start), g[j].At.Sub(ratelimittest.Start))
			}
		}
	}
	return nil
}

// alignedBound checks at most limit permits per window aligned to the epoch.
func alignedBound(w time.Duration) func(int64, []Grant) error {
	return func(limit int64, g []Grant) error {
		return pairs(g, func(a, b Grant, sum int64) bool {
			return !a.At.Truncate(w).Equal(b.At.Truncate(w)) || sum <= limit
		})
	}
}

// Option adjusts the suite to a backend.
type Option func(*suite)

// Tick sets the resolution of the backend's clock (1ns by default; the redis
// backend's is 1µs): instants the suite uses are multiples of it, RetryAfter
// is expected rounded up to it, and "one tick less" is one tick.
func Tick(d time.Duration) Option { return func(s *suite) { s.tick = d } }

type suite struct {
	f    Factory
	tick time.Duration
}

func newSuite(f Factory, opts []Option) *suite {
	s := &suite{f: f, tick: time.Nanosecond}
	for _, o := range opts {
		o(s)
	}
	return s
}

// round rounds d (> 0) to a multiple of the tick: up, or down when down is set.
func (s *suite) round(d time.Duration, down bool) time.Duration {
	if r := d % s.tick; r != 0 {
		d -= r
		if !down {
			d += s.tick
		}
	}
	return d
}

// Run runs the Acquire scenarios against limiters built by f.
func Run(t *testing.T, f Factory, opts ...Option) {
	s := newSuite(f, opts)
	t.Run("Sequences", func(t *testing.T) { testSequences(t, s) })
	for _, a := range Algorithms() {
		a := a
		t.Run(a.Name, func(t *testing.T) {
			if a.Rate { // concurrency's RetryAfter is unknown, checked in Sequences
				t.Run("RetryAfterExact", func(t *testing.T) { testRetryAfterExact(t, s, a) })
			}
			t.Run("StatusCheck", func(t *testing.T) { testStatusCheck(t, s, a) })
			t.Run("Errors", func(t *testing.T) { testErrors(t, s, a) })
			t.Run("Bound", func(t *testing.T) { testBound(t, s, a) })
			t.Run("Hammer", func(t *testing.T) { testHammer(t, s, a) })
		})
	}
}

// Step is one request of a sequence: advance the clock, optionally release
// the lease of an earlier step, then acquire Permits and compare.
type Step struct {
	Advance   time.Duration
	Release   int // 1-based index of an earlier step whose lease to release; 0 for none
	Permits   int
	Granted   bool
	Remaining int64
	// RetryAfter is checked on refusals; negative means it must be unknown.
	RetryAfter time.Duration
	// ResetAfter is checked when not zero.
	ResetAfter time.Duration
}

// Sequence is an exact scenario for one configuration.
type Sequence struct {
	Name   string
	Config ratelimit.Config
	Steps  []Step
}

const ms = time.Millisecond

// Sequences returns the exact scenarios, one or more per algorithm.
func Sequences() []Sequence {
	return []Sequence{
		{"tokenbucket", tokenbucket.Config{Rate: 4, Burst: 4}, []Step{
			{Permits: 4, Granted: true, Remaining: 0, ResetAfter: time.Second},
			// Like x/time/rate, a request is granted once its missing tokens
			// are less than 1ns of refill away: 1ns before the exact quotient.
			{Permits: 1, RetryAfter: 250*ms - 1, ResetAfter: time.Second},
			{Advance: 250 * ms, Permits: 1, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Permits: 3, RetryAfter: 750*ms - 1, ResetAfter: time.Second},
			{Advance: 500 * ms, Permits: 3, RetryAfter: 250*ms - 1, ResetAfter: 500 * ms},
			{Advance: 250 * ms, Permits: 3, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Advance: 5 * time.Second, Permits: 1, Granted: true, Remaining: 3, ResetAfter: 250 * ms},
		}},
		{"tokenbucket-interval", tokenbucket.Config{Period: time.Second, PerPeriod: 2, Burst: 4}, []Step{
			{Permits: 4, Granted: true, Remaining: 0, ResetAfter: 2 * time.Second},
			{Permits: 1, RetryAfter: time.Second, ResetAfter: 2 * time.Second},
			{Advance: 999 * ms, Permits: 1, RetryAfter: 1 * ms, ResetAfter: 1001 * ms},
			{Advance: 1 * ms, Permits: 2, Granted: true, Remaining: 0, ResetAfter: 2 * time.Second},
			{Advance: 500 * ms, Permits: 3, RetryAfter: 1500 * ms, ResetAfter: 1500 * ms},
			{Advance: 1500 * ms, Permits: 3, Granted: true, Remaining: 1, ResetAfter: 2 * time.Second},
		}},
		{"fixedwindow", fixedwindow.Config{Limit: 3, Window: time.Second}, []Step{
			{Permits: 2, Granted: true, Remaining: 1, ResetAfter: time.Second},
			{Permits: 2, RetryAfter: time.Second, ResetAfter: time.Second},
			{Permits: 1, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Advance: 999 * ms, Permits: 1, RetryAfter: 1 * ms, ResetAfter: 1 * ms},
			{Advance: 1 * ms, Permits: 3, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Advance: 1500 * ms, Permits: 1, Granted: true, Remaining: 2, ResetAfter: 500 * ms},
		}},
		{"slidingwindow-segmented", slidingwindow.Config{Limit: 4, Window: time.Second, Segments: 4}, []Step{
			{Permits: 2, Granted: true, Remaining: 2, ResetAfter: time.Second},
			{Advance: 250 * ms, Permits: 2, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Permits: 1, RetryAfter: 750 * ms, ResetAfter: time.Second},
			{Advance: 749 * ms, Permits: 1, RetryAfter: 1 * ms, ResetAfter: 251 * ms},
			{Advance: 1 * ms, Permits: 2, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Permits: 1, RetryAfter: 250 * ms, ResetAfter: time.Second},
		}},
		{"slidingwindow-weighted", slidingwindow.Config{Limit: 10, Window: time.Second}, []Step{
			{Permits: 10, Granted: true, Remaining: 0, ResetAfter: 2 * time.Second},
			{Advance: time.Second, Permits: 1, RetryAfter: 100 * ms, ResetAfter: time.Second},
			{Advance: 99 * ms, Permits: 1, RetryAfter: 1 * ms, ResetAfter: 901 * ms},
			{Advance: 1 * ms, Permits: 1, Granted: true, Remaining: 0, ResetAfter: 1900 * ms},
			{Advance: 500 * ms, Permits: 6, RetryAfter: 100 * ms, ResetAfter: 1400 * ms},
			{Permits: 5, Granted: true, Remaining: 0, ResetAfter: 1400 * ms},
		}},
		{"slidinglog", slidinglog.Config{Limit: 3, Window: time.Second}, []Step{
			{Permits: 1, Granted: true, Remaining: 2, ResetAfter: time.Second},
			{Advance: 300 * ms, Permits: 2, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Permits: 1, RetryAfter: 700 * ms, ResetAfter: time.Second},
			{Advance: 700 * ms, Permits: 1, Granted: true, Remaining: 0, ResetAfter: time.Second},
			{Permits: 1, RetryAfter: 300 * ms, ResetAfter: time.Second},
			{Advance: 300 * ms, Permits: 3, RetryAfter: 700 * ms, ResetAfter: 700 * ms},
		}},
		{"concurrency", concurrency.Config{Limit: 2}, []Step{
			{Permits: 1, Granted: true, Remaining: 1},
			{Permits: 1, Granted: true, Remaining: 0},
			{Permits: 1, RetryAfter: -1},
			{Release: 1, Permits: 1, Granted: true, Remaining: 0},
			{Release: 1, Permits: 1, RetryAfter: -1}, // a second Release of the same lease does nothing
			{Release: 2, Permits: 2, RetryAfter: -1},
			{Release: 4, Permits: 2, Granted: true, Remaining: 0},
		}},
	}
}

func testSequences(t *testing.T, s *suite) { runSequences(t, s, Sequences()) }

// RunSequences runs exact scenarios of one's own, as Run does its
// Sequences, against limiters built by f, on a clock that starts at
// ratelimittest.Start: an algorithm's own package (a calendar quota's,
// whose scenarios cross dates of their own) runs them on each backend.
func RunSequences(t *testing.T, f Factory, seqs []Sequence, opts ...Option) {
	runSequences(t, newSuite(f, opts), seqs)
}

func runSequences(t *testing.T, s *suite, seqs []Sequence) {
	for _, seq := range seqs {
		seq := seq
		t.Run(seq.Name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := s.f(t, seq.Config, clock)
			leases := make([]ratelimit.Lease, len(seq.Steps))
			for i, st := range seq.Steps {
				clock.Advance(st.Advance)
				if st.Release > 0 {
					leases[st.Release-1].Release()
				}
				lease, err := l.Acquire(context.Background(), st.Permits)
				if err != nil {
					t.Fatalf("step %d: Acquire(%d): %v", i+1, st.Permits, err)
				}
				leases[i] = lease
				if st.RetryAfter > 0 {
					st.RetryAfter = s.round(st.RetryAfter, false)
				}
				CheckLease(t, fmt.Sprintf("step %d", i+1), lease, st)
				if lease.Limit() != seq.Config.Capacity() {
					t.Errorf("step %d: Limit() = %d, want %d", i+1, lease.Limit(), seq.Config.Capacity())
				}
			}
		})
	}
}

// CheckLease compares a lease with the expectation of a Step.
func CheckLease(t testing.TB, what string, lease ratelimit.Lease, s Step) {
	t.Helper()
	if lease.Acquired() != s.Granted {
		t.Fatalf("%s: Acquired() = %v, want %v (%v)", what, lease.Acquired(), s.Granted, lease)
	}
	if s.Granted && lease.Remaining() != s.Remaining {
		t.Errorf("%s: Remaining() = %d, want %d", what, lease.Remaining(), s.Remaining)
	}
	if s.ResetAfter != 0 && lease.ResetAfter() != s.ResetAfter {
		t.Errorf("%s: ResetAfter() = %v, want %v", what, lease.ResetAfter(), s.ResetAfter)
	}
	if s.Granted {
		return
	}
	if lease.Reason() != ratelimit.ReasonLimit {
		t.Errorf("%s: Reason() = %v, want %v", what, lease.Reason(), ratelimit.ReasonLimit)
	}
	d, ok := lease.RetryAfter()
	switch {
	case s.RetryAfter < 0 && ok:
		t.Errorf("%s: RetryAfter() = %v, want unknown", what, d)
	case s.RetryAfter >= 0 && (!ok || d != s.RetryAfter):
		t.Errorf("%s: RetryAfter() = %v, %v; want %v", what, d, ok, s.RetryAfter)
	}
}

func mustAcquire(t testing.TB, l ratelimit.Limiter, permits int) ratelimit.Lease {
	t.Helper()
	lease, err := l.Acquire(context.Background(), permits)
	if err != nil {
		t.Fatalf("Acquire(%d): %v", permits, err)
	}
	return lease
}

// testRetryAfterExact: at every refusal, the same request is refused one
// nanosecond before RetryAfter has passed and granted once it has.
func testRetryAfterExact(t *testing.T, s *suite, a Algorithm) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 20; trial++ {
		limit := 1 + rng.Intn(10)
		clock := ratelimittest.NewClock()
		clock.Advance(s.round(time.Duration(rng.Int63n(int64(time.Second))), true))
		l := s.f(t, a.Config(limit, ratelimit.Queue{}), clock)
		refusals := 0
		for i := 0; i < 100 && refusals < 10; i++ {
			clock.Advance(s.round(time.Duration(rng.Int63n(int64(300*ms))), true))
			p := 1 + rng.Intn(limit)
			lease := mustAcquire(t, l, p)
			if lease.Acquired() {
				continue
			}
			refusals++
			d, ok := lease.RetryAfter()
			if !ok || d <= 0 {
				t.Fatalf("trial %d: refusal of %d without a positive RetryAfter: %v", trial, p, lease)
			}
			if d%s.tick != 0 {
				t.Fatalf("trial %d: RetryAfter %v is not a multiple of the clock's tick %v", trial, d, s.tick)
			}
			clock.Advance(d - s.tick)
			if early := mustAcquire(t, l, p); early.Acquired() {
				t.Fatalf("trial %d: %d permits granted one tick before RetryAfter %v", trial, p, d)
			} else if d2, _ := early.RetryAfter(); d2 != s.tick {
				t.Fatalf("trial %d: one tick before RetryAfter %v, RetryAfter = %v, want %v", trial, d, d2, s.tick)
			}
			clock.Advance(s.tick)
			if late := mustAcquire(t, l, p); !late.Acquired() {
				t.Fatalf("trial %d: %d permits refused after RetryAfter %v: %v", trial, p, d, late)
			}
		}
		if refusals == 0 {
			t.Fatalf("trial %d: no refusal to check", trial)
		}
	}
}

// testStatusCheck: permits == 0 reports availability and takes nothing.
func testStatusCheck(t *testing.T, s *suite, a Algorithm) {
	clock := ratelimittest.NewClock()
	l := s.f(t, a.Config(3, ratelimit.Queue{}), clock)
	for i := 0; i < 3; i++ {
		if s := mustAcquire(t, l, 0); !s.Acquired() || s.Remaining() != 3 {
			t.Fatalf("status check on a fresh limiter: %v, want granted with 3 remaining", s)
		}
	}
	if g := mustAcquire(t, l, 2); !g.Acquired() || g.Remaining() != 1 {
		t.Fatalf("Acquire(2) after status checks: %v, want granted with 1 remaining", g)
	}
	mustAcquire(t, l, 1)
	if s := mustAcquire(t, l, 0); s.Acquired() || s.Remaining() != 0 {
		t.Fatalf("status check on an exhausted limiter: %v, want refused with 0 remaining", s)
	}
}

// testErrors: bad arguments return the sentinels and change nothing.
func testErrors(t *testing.T, s *suite, a Algorithm) {
	clock := ratelimittest.NewClock()
	l := s.f(t, a.Config(5, ratelimit.Queue{Limit: 10}), clock)
	ctx := context.Background()
	for _, c := range []struct {
		permits int
		want    error
	}{{-1, ratelimit.ErrInvalidPermits}, {-1 << 62, ratelimit.ErrInvalidPermits}, {6, ratelimit.ErrExceedsLimit}, {1 << 62, ratelimit.ErrExceedsLimit}} {
		if _, err := l.Acquire(ctx, c.permits); !errors.Is(err, c.want) {
			t.Errorf("Acquire(%d) = %v, want %v", c.permits, err, c.want)
		}
		if _, err := l.Wait(ctx, c.permits); !errors.Is(err, c.want) {
			t.Errorf("Wait(%d) = %v, want %v", c.permits, err, c.want)
		}
	}
	if g := mustAcquire(t, l, 5); !g.Acquired() {
		t.Fatalf("Acquire(5) after rejected calls: %v, want granted (the errors must change no state)", g)
	}
}

// testBound: under random traffic the grants respect the algorithm's bound,
// and a concurrency limiter never has more than its limit held. The 20
// trials are independent limiters, each on its own clock and its own
// random sequence, run side by side: each trial's calls are in order, and
// a backend that batches concurrent calls batches the trials'.
func testBound(t *testing.T, s *suite, a Algorithm) {
	const trials = 20
	type trial struct {
		rng   *rand.Rand
		limit int64
		clock *ratelimittest.Clock
		l     ratelimit.Limiter
		err   error
	}
	ts := make([]trial, trials)
	for i := range ts {
		tr := &ts[i]
		tr.rng = rand.New(rand.NewSource(int64(2 + i)))
		tr.limit = int64(1 + tr.rng.Intn(20))
		tr.clock = ratelimittest.NewClock()
		tr.l = s.f(t, a.Config(int(tr.limit), ratelimit.Queue{}), tr.clock)
	}
	var wg sync.WaitGroup
	for i := range ts {
		wg.Add(1)
		go func(tr *trial) {
			defer wg.Done()
			tr.err = boundTrial(s, a, tr.rng, tr.limit, tr.clock, tr.l)
		}(&ts[i])
	}
	wg.Wait()
	for i, tr := range ts {
		if tr.err != nil {
			t.Errorf("trial %d (limit %d): %v", i, tr.limit, tr.err)
		}
	}
}

// boundTrial is one trial of testBound: 300 requests of random sizes at
// random instants on l, whose limit is limit; it returns the first breach
// of the bound, or of the limit held, that it sees.
func boundTrial(s *suite, a Algorithm, rng *rand.Rand, limit int64, clock *ratelimittest.Clock, l ratelimit.Limiter) error {
	var grants []Grant
	type hold struct {
		lease   ratelimit.Lease
		permits int64
	}
	var held []hold
	var inUse, granted int64
	for i := 0; i < 300; i++ {
		clock.Advance(s.round(time.Duration(rng.Int63n(int64(100*ms))), true))
		if !a.Rate && len(held) > 0 && rng.Intn(2) == 0 {
			k := rng.Intn(len(held))
			held[k].lease.Release()
			inUse -= held[k].permits
			held = append(held[:k], held[k+1:]...)
		}
		p := 1 + rng.Int63n(limit)
		lease, err := l.Acquire(context.Background(), int(p))
		if err != nil {
			return fmt.Errorf("Acquire(%d): %w", p, err)
		}
		if !lease.Acquired() {
			continue
		}
		granted += p
		grants = append(grants, Grant{At: clock.Now(), Permits: p})
		held = append(held, hold{lease, p})
		if inUse += p; !a.Rate && inUse > limit {
			return fmt.Errorf("%d permits held, limit %d", inUse, limit)
		}
	}
	if granted == 0 {
		return errors.New("nothing granted")
	}
	if a.Bound != nil {
		return a.Bound(limit, grants)
	}
	return nil
}

// testHammer: goroutines compete for a limiter whose clock stands still; the
// permits granted add up to the limit exactly.
func testHammer(t *testing.T, s *suite, a Algorithm) {
	const limit, workers = 1000, 16
	l := s.f(t, a.Config(limit, ratelimit.Queue{}), ratelimittest.NewClock())
	var granted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			p := 1 + w%3
			for {
				lease, err := l.Acquire(context.Background(), p)
				if err != nil {
					t.Error(err)
					return
				}
				if !lease.Acquired() {
					if p == 1 {
						return
					}
					p = 1
					continue
				}
				granted.Add(int64(p))
			}
		}(w)
	}
	wg.Wait()
	if g := granted.Load(); g != limit {
		t.Fatalf("%d permits granted by %d goroutines, want exactly %d", g, workers, limit)
	}
}
