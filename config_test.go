package ratelimit_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestConfigValidation: every field is checked, and the error names the
// field and the value, wraps ErrInvalidConfig, and comes from memory.New too.
func TestConfigValidation(t *testing.T) {
	huge := 1 << 60
	long := time.Duration(math.MaxInt64)
	q := func(limit int, order ratelimit.QueueOrder) ratelimit.Queue {
		return ratelimit.Queue{Limit: limit, Order: order}
	}
	tb := func(r rate.Limit, burst int) tokenbucket.Config { return tokenbucket.Config{Rate: r, Burst: burst} }
	for _, c := range []struct {
		cfg  ratelimit.Config
		want string // field, then value, both in the message
	}{
		{tb(10, 0), "Burst|got 0"},
		{tb(10, -1), "Burst|got -1"},
		{tb(10, huge), "Burst|1152921504606846976"},
		{tb(0, 1), "Rate|got 0"},
		{tb(-5, 1), "Rate|got -5"},
		{tb(rate.Limit(math.NaN()), 1), "Rate|NaN"},
		{tb(rate.Limit(math.Inf(-1)), 1), "Rate|-Inf"},
		{tb(1e-12, 10), "Rate 1e-12|too small"},
		{tokenbucket.Config{Rate: 1, Burst: 1, Period: time.Second, PerPeriod: 1}, "Rate or Period|Period 1s"},
		{tokenbucket.Config{Burst: 1, Period: -time.Second, PerPeriod: 1}, "Period|-1s"},
		{tokenbucket.Config{Burst: 1, Period: long, PerPeriod: 1}, "Period|2562047h"},
		{tokenbucket.Config{Burst: 1, Period: time.Second}, "PerPeriod|got 0"},
		{tokenbucket.Config{Rate: 1, Burst: 1, Queue: q(-1, 0)}, "Queue.Limit|got -1"},
		{tokenbucket.Config{Rate: 1, Burst: 1, Queue: q(huge, 0)}, "Queue.Limit|1152921504606846976"},
		{tokenbucket.Config{Rate: 1, Burst: 1, Queue: q(1, 7)}, "Queue.Order|QueueOrder(7)"},
		{fixedwindow.Config{Limit: 0, Window: time.Second}, "Limit|got 0"},
		{fixedwindow.Config{Limit: 1, Window: 0}, "Window|got 0s"},
		{fixedwindow.Config{Limit: 1, Window: -time.Minute}, "Window|-1m0s"},
		{fixedwindow.Config{Limit: 1, Window: long}, "Window|2562047h"},
		{slidingwindow.Config{Limit: -3, Window: time.Second}, "Limit|got -3"},
		{slidingwindow.Config{Limit: 1, Window: time.Second, Segments: -1}, "Segments|got -1"},
		{slidingwindow.Config{Limit: 1, Window: time.Second, Segments: slidingwindow.MaxSegments + 1}, "Segments|65537"},
		{slidingwindow.Config{Limit: 1, Window: time.Second, Segments: 3}, "Window 1s|Segments 3"},
		{slidinglog.Config{Limit: huge, Window: time.Second}, "Limit|1152921504606846976"},
		{slidinglog.Config{Limit: 1, Window: -1}, "Window|-1ns"},
		{concurrency.Config{Limit: 0}, "Limit|got 0"},
		{concurrency.Config{Limit: 1, Queue: q(0, 2)}, "Queue.Order|QueueOrder(2)"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("%#v: Validate() = %v, want ErrInvalidConfig", c.cfg, err)
			continue
		}
		for _, part := range strings.Split(c.want, "|") {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%#v: %q does not mention %q", c.cfg, err, part)
			}
		}
		if l, err2 := memory.New(c.cfg); l != nil || err2 == nil || err2.Error() != err.Error() {
			t.Errorf("memory.New(%#v) = %v, %v; want the Validate error", c.cfg, l, err2)
		}
	}
	if _, err := memory.New(nil); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("memory.New(nil): %v", err)
	}
	// Edge values that are valid.
	for _, cfg := range []ratelimit.Config{
		tb(rate.Inf, 1), tb(1e-3, 1), &fixedwindow.Config{Limit: 1 << 53, Window: 100 * 365 * 24 * time.Hour},
		slidingwindow.Config{Limit: 1, Window: 3 * time.Second, Segments: 3},
	} {
		if _, err := memory.New(cfg); err != nil {
			t.Errorf("memory.New(%#v): %v, want valid", cfg, err)
		}
	}
}
