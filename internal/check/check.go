// Package check holds the bounds every algorithm's configuration shares, and
// the search that turns a model's grant predicate into an exact RetryAfter.
package check

import (
	"fmt"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
)

// MaxLimit bounds every count (limits, bursts, queue limits). Counts stay
// exact in a float64 (and in Redis's Lua numbers), and sums of two never
// overflow an int64.
const MaxLimit = 1 << 53

// MaxDuration bounds windows and periods: 100 years. Instants up to two
// windows past any date before 2170 then fit in int64 nanoseconds.
const MaxDuration = 100 * 365 * 24 * time.Hour

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

// Queue checks a queue configuration.
func Queue(pkg string, q ratelimit.Queue) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	return Count(pkg, "Queue.Limit", q.Limit, 0)
}

// Earliest returns the smallest t in [lo, hi] for which ok(t) holds, given that
// ok is monotone (false then true) and ok(hi) holds; guess is where to start.
// It costs O(log(distance from guess)) calls of ok.
func Earliest(lo, hi, guess int64, ok func(int64) bool) int64 {
	guess = min(max(guess, lo), hi)
	// Widen a bracket [f, t] around guess with ok(f) false and ok(t) true.
	var f, t int64
	if ok(guess) {
		t, f = guess, guess-1
		for step := int64(1); f >= lo && ok(f); step *= 2 {
			t = f
			f = max(t-step, lo-1)
		}
		if f < lo {
			f = lo - 1
		}
	} else {
		f, t = guess, guess+1
		for step := int64(1); t < hi && !ok(t); step *= 2 {
			f = t
			t = min(f+step, hi)
		}
		if t > hi {
			t = hi
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

// Far is an instant later than any decision needs (year 2116): the upper
// bound of searches, and what saturating arithmetic stops at.
const Far = math.MaxInt64 / 2

// AddFloat returns t + d (d in nanoseconds, d >= 0), saturating at Far.
func AddFloat(t int64, d float64) int64 {
	if d >= float64(Far-t) {
		return Far
	}
	return t + int64(d)
}

// CeilDiv returns ceil(a/b) for a >= 0, b > 0.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// Within reports whether t lies in the period of length p starting at start,
// the fast path that spares FloorStart's 64-bit division on most calls.
func Within(t, start, p int64) bool { return t >= start && t-start < p }

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
