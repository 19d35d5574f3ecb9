package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// The extremes Validate accepts: counts up to 2^53, windows and fill
// times up to 100 years.
const (
	maxCount    = 1 << 53
	century     = 100 * 365 * 24 * time.Hour
	yearsNinety = 95 * 365 * 24 * time.Hour
)

// ExtremeConfigs returns valid configurations at the ends of what
// Validate accepts, each with a queue, for RunExtremes. Windows are whole
// microseconds, so that a backend with Redis's clock takes them too.
func ExtremeConfigs() []ratelimit.Config {
	q := ratelimit.Queue{Limit: 4}
	segments := slidingwindow.MaxSegments
	segmented := time.Duration(int64(century) / int64(segments) / int64(time.Microsecond) * int64(segments) * int64(time.Microsecond))
	return []ratelimit.Config{
		tokenbucket.Config{Rate: rate.Every(yearsNinety), Burst: 1, Queue: q},
		tokenbucket.Config{Rate: 1e-9, Burst: 1, Queue: ratelimit.Queue{Limit: 16, Order: ratelimit.NewestFirst}},
		tokenbucket.Config{Rate: maxCount, Burst: maxCount, Queue: q},
		tokenbucket.Config{Period: century, PerPeriod: 1, Burst: maxCount, Queue: q},
		tokenbucket.Config{Period: time.Microsecond, PerPeriod: maxCount, Burst: 1, Queue: q},
		fixedwindow.Config{Limit: maxCount, Window: century, Queue: q},
		fixedwindow.Config{Limit: 1, Window: time.Microsecond, Queue: q},
		slidingwindow.Config{Limit: maxCount, Window: century, Queue: q},
		slidingwindow.Config{Limit: 1, Window: segmented, Segments: segments, Queue: q},
		slidingwindow.Config{Limit: maxCount, Window: segmented, Segments: segments, Queue: q},
		slidinglog.Config{Limit: maxCount, Window: century, Queue: q},
		slidinglog.Config{Limit: 1, Window: time.Microsecond, Queue: q},
		concurrency.Config{Limit: maxCount, Queue: q},
	}
}

// RunExtremes runs each ExtremeConfigs limiter, built by f on a fake clock
// at Start (2033, so that context deadlines set on it lie in the future):
// it takes the whole capacity, then every call answers
// (a test that hangs fails), a refusal's RetryAfter is positive and exact
// (refused one tick before it, granted at it) unless it is the documented
// cap (the year 2255), and a Wait whose deadline is one tick short of it is
// refused at once for its deadline, taking nothing.
func RunExtremes(t *testing.T, f Factory, opts ...Option) {
	s := newSuite(f, opts)
	for _, cfg := range ExtremeConfigs() {
		cfg := cfg
		t.Run(fmt.Sprintf("%T%+v", cfg, cfg), func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := s.f(t, cfg, clock)
			for _, e := range within(t, func(errorf func(string, ...any)) { extremes(errorf, s, l, cfg, clock) }) {
				t.Error(e)
			}
		})
	}
}

// within runs f in a goroutine and returns what f reported through its
// errorf, failing t if f does not return within 10 seconds (a decision
// that does not end; the goroutine is then left behind).
func within(t *testing.T, f func(errorf func(string, ...any))) []string {
	t.Helper()
	done := make(chan []string, 1)
	go func() {
		var errs []string
		f(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
		done <- errs
	}()
	select {
	case errs := <-done:
		return errs
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer within 10s: a decision does not end")
		return nil
	}
}

// far is the latest instant a RetryAfter reaches: 2^53 microseconds.
var far = time.UnixMicro(1 << 53)

// extremes runs in a goroutine of its own (see within): it reports
// through errorf, never through t.
func extremes(errorf func(string, ...any), s *suite, l ratelimit.Limiter, cfg ratelimit.Config, clock *ratelimittest.Clock) {
	acquire := func(p int) ratelimit.Lease {
		lease, err := l.Acquire(context.Background(), p)
		if err != nil {
			errorf("Acquire(%d): %v", p, err)
		}
		return lease
	}
	capacity := int(cfg.Capacity())
	if g := acquire(capacity); !g.Acquired() {
		errorf("Acquire(%d) on a new limiter: %v", capacity, g)
		return
	}
	refused := acquire(1)
	if refused.Acquired() {
		return // refilled at once (a rate of 2^53 per second): nothing to wait for
	}
	d, ok := refused.RetryAfter()
	if desc, err := algo.Of("conformance", cfg); err == nil && desc.Holds() { // a concurrency limit
		if ok {
			errorf("concurrency refusal with RetryAfter %v", d)
		}
		return
	}
	if !ok || d <= 0 {
		errorf("refusal without a positive RetryAfter: %v", refused)
		return
	}
	if d%s.tick != 0 {
		errorf("RetryAfter %v is not a whole tick (%v)", d, s.tick)
	}
	// A Wait that cannot be served by its deadline is refused at once.
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(d-s.tick))
	defer cancel()
	w, err := l.Wait(ctx, 1)
	if err != nil || w.Acquired() || w.Reason() != ratelimit.ReasonDeadline {
		errorf("Wait with a deadline one tick before RetryAfter %v: %v, %v; want refused (deadline)", d, w, err)
	}
	if !clock.Now().Add(d).Before(far) {
		return // the documented cap: no instant to check beyond it
	}
	clock.Advance(d - s.tick)
	if early := acquire(1); early.Acquired() {
		errorf("granted one tick before RetryAfter %v", d)
	}
	clock.Advance(s.tick)
	if late := acquire(1); !late.Acquired() {
		errorf("refused at RetryAfter %v: %v", d, late)
	}
}
