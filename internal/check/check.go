// Package check holds the bounds every algorithm's configuration shares, and
// the search that turns a model's grant predicate into an exact RetryAfter.
package check

import (
	"fmt"
	"reflect"
	"time"

	"github.com/limitkit/ratelimit"
)

// MaxLimit bounds every count (limits, bursts, queue limits). Counts stay
// exact in a float64 (and in Redis's Lua numbers), and sums of two never
// overflow an int64.
const MaxLimit = 1 << 53

// MaxDuration bounds windows and periods: 100 years. Two windows past any
// decision made before 2055 end before Far; later, sums of instants and
// durations saturate at Far (Add, AddFloat) rather than overflow.
const MaxDuration = 100 * 365 * 24 * time.Hour

// Charged is count after a charge of permits (a settlement's excess,
// counted without refusing): it stops at MaxLimit, so that every count
// stays exact.
func Charged(count, permits int64) int64 { return count + min(permits, max(MaxLimit-count, 0)) }

// Count checks that v is in [min, MaxLimit].
func Count(pkg, field string, v int, min int) error {
	if v < min || int64(v) > MaxLimit {
		return fmt.Errorf("%w: %s: %s must be in [%d, 2^53], got %d", ratelimit.ErrInvalidConfig, pkg, field, min, v)
	}
	return nil
}

// Duration checks that d is in (0, MaxDuration].
func Duration(pkg, field string, d time.Duration) error {
	if d <= 0 || d > MaxDuration {
		return fmt.Errorf("%w: %s: %s must be in (0, %v], got %v", ratelimit.ErrInvalidConfig, pkg, field, MaxDuration, d)
	}
	return nil
}

// LimitWindow checks the fields the window algorithms (fixedwindow,
// slidinglog, slidingwindow) share: Limit in [1, MaxLimit], then Window in
// (0, MaxDuration].
func LimitWindow(pkg string, limit int, window time.Duration) error {
	if err := Count(pkg, "Limit", limit, 1); err != nil {
		return err
	}
	return Duration(pkg, "Window", window)
}

// Queue checks a queue configuration.
func Queue(pkg string, q ratelimit.Queue) error {
	if q.Order > ratelimit.NewestFirst {
		return fmt.Errorf("%w: %s: Queue.Order must be OldestFirst or NewestFirst, got %v", ratelimit.ErrInvalidConfig, pkg, q.Order)
	}
	return Count(pkg, "Queue.Limit", q.Limit, 0)
}

// QueueLimit is the most permits q lets wait at once: q.Limit, or MaxLimit
// (no bound in practice: the waiters' contexts bound their wait) when it
// is zero.
func QueueLimit(q ratelimit.Queue) int64 {
	if q.Limit == 0 {
		return MaxLimit
	}
	return int64(q.Limit)
}

// Earliest returns the smallest t in [lo, hi] for which ok(t) holds, given that
// ok is monotone (false then true); hi when ok(hi) does not hold either.
// guess is where to start. It calls ok at most about 4×63 times, whatever
// the bounds: a bracket around guess that doubles, then a bisection; no
// sum below overflows.
func Earliest(lo, hi, guess int64, ok func(int64) bool) int64 {
	guess = min(max(guess, lo), hi)
	// Widen a bracket (f, t] around guess with ok(f) false (or f < lo) and
	// ok(t) true (or t == hi).
	var f, t int64
	if ok(guess) {
		t = guess
		for step := int64(1); t > lo; step = min(2*step, Far) {
			f = t - min(step, t-lo)
			if !ok(f) {
				break
			}
			t = f
		}
		if t == lo {
			return lo
		}
	} else {
		f = guess
		for step := int64(1); ; step = min(2*step, Far) {
			if f == hi {
				return hi
			}
			t = f + min(step, hi-f)
			if ok(t) {
				break
			}
			f = t
		}
	}
	for t-f > 1 {
		m := f + (t-f)/2
		if ok(m) {
			t = m
		} else {
			f = m
		}
	}
	return t
}

// Far is the latest instant a decision names (2^53 microseconds after the
// Unix epoch, in the year 2255): RetryAfter, ResetAfter and the instants
// searches look at stop there, and saturating arithmetic does. It is a
// whole number of microseconds that a float64, and so Redis's Lua, holds
// exactly, so both backends stop at the same instant. Every window and
// fill time Validate accepts (at most MaxDuration) ends before it for any
// decision made before the year 2155.
const Far = (1 << 53) * int64(time.Microsecond)

// AddFloat returns t + d (d in nanoseconds, d >= 0, t <= Far), saturating
// at Far.
func AddFloat(t int64, d float64) int64 {
	if d >= float64(Far-t) {
		return Far
	}
	return t + int64(d)
}

// Config reports a nil config, or a nil pointer to one, which a backend
// would otherwise dereference.
func Config(pkg string, cfg ratelimit.Config) error {
	if cfg == nil {
		return fmt.Errorf("%w: %s: nil config", ratelimit.ErrInvalidConfig, pkg)
	}
	if IsNil(cfg) {
		return fmt.Errorf("%w: %s: nil %T", ratelimit.ErrInvalidConfig, pkg, cfg)
	}
	return nil
}

// CeilSeconds rounds d up to whole seconds, as HTTP's delay-seconds and
// gRPC's retry-after require, in integers: float64 seconds lose the
// nanoseconds of durations above about 104 days (2^53 ns), and
// 31,000,000s + 1ns must be sent as 31000001. Negative durations are 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// Value is the Config cfg points to when it is a non-nil pointer to one
// (&tokenbucket.Config{...}), and cfg otherwise: backends switch on the
// algorithms' value types only.
func Value(cfg ratelimit.Config) ratelimit.Config {
	if v := reflect.ValueOf(cfg); v.Kind() == reflect.Pointer && !v.IsNil() {
		if c, ok := v.Elem().Interface().(ratelimit.Config); ok {
			return c
		}
	}
	return cfg
}

// Add returns t + d for d >= 0, saturating at Far: the end of a window or
// a wait that would fall past Far is Far.
func Add(t, d int64) int64 {
	if t >= Far || d >= Far-t {
		return Far
	}
	return t + d
}

// CeilDiv returns ceil(a/b) for a >= 0, b > 0.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// FloorStart returns the start of the period of length p that contains t.
func FloorStart(t, p int64) int64 {
	r := t % p
	if r < 0 {
		r += p
	}
	return t - r
}

// Floor converts a token count to whole permits, 0 when negative. (For
// x >= 0 truncation is the floor; math.Floor is a call on GOAMD64=v1.)
func Floor(x float64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(x)
}

// Ceil returns x rounded up, for 0 <= x < 2^63, without math.Ceil's call.
func Ceil(x float64) int64 {
	r := int64(x)
	if float64(r) < x {
		r++
	}
	return r
}

// IsNil reports whether v is nil, or a nil pointer, func, map, slice, chan
// or interface held in an interface (a typed nil, which a plain == nil
// misses).
func IsNil(v any) bool {
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Invalid:
		return true
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
