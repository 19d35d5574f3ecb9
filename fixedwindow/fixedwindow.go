// Package fixedwindow is the fixed window algorithm: at most Limit permits in
// each window of length Window, windows aligned to the Unix epoch so every
// replica agrees where a window starts.
//
// Behaviour: the cheapest algorithm (one counter and one timestamp per key,
// 16 bytes). Its weakness is the boundary: a client may take Limit permits at
// the end of one window and Limit more at the start of the next, so up to
// 2×Limit pass within one Window's length. It never admits more than Limit in
// any aligned window. A refused request can retry when the window ends. A
// decision at an instant older than the state's window (a clock read before
// another goroutine decided) counts in the state's window.
//
// Reconfigured while it runs (control.Reconfigure), the permits counted
// in the current window stay counted, against the new Limit, until the
// window of the new length in which the change falls ends (on Redis too: a
// count whose window has not ended when the change is first read is held
// in that window; one whose window has ended is gone).
package fixedwindow

import (
	// For the memory engine compiled here: see internal/algo's doc.
	_ "sync"

	"github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/base"

	"fmt"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/engine"
)

// Config configures a fixed window limiter.
type Config struct {
	// Limit is the most permits granted per window. Required.
	Limit int
	// Window is the window length; windows start at multiples of Window since
	// the Unix epoch. Required.
	Window time.Duration
	// Queue configures Wait; the zero value waits in arrival order, as
	// long as the ctx of each Wait allows (see ratelimit.Queue).
	Queue ratelimit.Queue
}

const pkg = "fixedwindow"

// Validate reports the first invalid field, wrapping ratelimit.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := check.LimitWindow(pkg, c.Limit, c.Window); err != nil {
		return err
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Limit.
func (c Config) Capacity() int64 { return int64(c.Limit) }

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// state is the count of permits granted in the window starting at Start
// (nanoseconds since the Unix epoch).
type state struct {
	Start int64
	Count int64
}

// model is the reference model of a validated Config.
type model struct {
	engine.Defaults[state] // the optional methods its Caps leave out
	limit                  int64
	window                 int64
}

// newModel validates c and returns its model.
func newModel(c Config) (model, error) {
	if err := c.Validate(); err != nil {
		return model{}, err
	}
	return model{limit: int64(c.Limit), window: int64(c.Window)}, nil
}

// Initial is an empty window.
func (m *model) Initial() state { return state{} }

func (m *model) at(s state, now int64) state {
	if start := check.FloorStart(now, m.window); start > s.Start {
		return state{Start: start}
	}
	return s
}

// Used is the number of permits s counts at now, against any limit: a
// reconfigured limiter carries it over (see Holding).
func (m *model) Used(s state, now int64) int64 { return m.at(s, now).Count }

// Holding is the state in which used permits, any number, were taken at
// now: they count in now's window. A reconfigured limiter carries its
// count over so.
func (m *model) Holding(now, used int64) state {
	return state{Start: check.FloorStart(now, m.window), Count: used}
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but moving to now's window; its RetryAfter is
// the time to the window's end, when the whole Limit is available again.
func (m *model) Step(s state, now, permits int64) (state, backend.Decision) {
	cur := m.at(s, now)
	end := check.Add(cur.Start, m.window)
	d := backend.Decision{RetryAfter: -1, ResetAfter: time.Duration(end - now)}
	if cur.Count+max(permits, 1) <= m.limit {
		d.Granted = true
		cur.Count += permits
	} else {
		d.RetryAfter = time.Duration(end - now)
	}
	d.Remaining = max(m.limit-cur.Count, 0) // over the limit after a charge
	if cur.Count == 0 {
		d.ResetAfter = 0
	}
	// The state moves to now's window even on a refusal, so that a later
	// decision read at an older instant counts in it, not in a past window.
	return cur, d
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or the start of the state's window, where an older instant counts.
// A grant's refund takes it as at.
func (m *model) Made(s state, now int64) int64 { return max(now, s.Start) }

// Refund takes back permits granted at instant at, as if they had not been
// granted, while the window they were counted in is the state's.
func (m *model) Refund(s state, now, at, permits int64) state {
	// A grant at an instant before the state's window may have been
	// counted in it or in an older one: it is not taken back, which is
	// stricter than the exact answer, never looser.
	if check.FloorStart(at, m.window) == s.Start {
		s.Count -= min(permits, s.Count)
	}
	return s
}

// Charge counts permits in now's window without refusing (a settlement's
// excess), over the limit if need be: requests are then refused until the
// window ends, as when it is full. The count stops at check.MaxLimit.
func (m *model) Charge(s state, now, permits int64) state {
	s = m.at(s, now)
	s.Count = check.Charged(s.Count, permits)
	return s
}

// Available is the number of permits left in the current window (negative
// when a charge took it over its limit).
func (m *model) Available(s state, now int64) int64 { return m.limit - m.at(s, now).Count }

// InitialAt is the instant from which s, left alone, is an empty window.
func (m *model) InitialAt(s state) int64 {
	if s.Count == 0 {
		return math.MinInt64
	}
	return check.Add(s.Start, m.window)
}

// Caps: grants can be refunded and settled, and the count carries over a
// reconfiguration.
func (m *model) Caps() engine.Caps { return engine.Refunds | engine.Holds | engine.Charges }

func init() {
	algo.Register(&algo.Algorithm[Config, state]{
		Name: pkg,
		Model: func(c Config) (engine.Model[state], error) {
			m, err := newModel(c)
			return &m, err
		},
		Redis: func(c Config, _ algo.RedisOptions) (algo.Redis, error) {
			w, err := algo.Micros("Window", c.Window)
			if err != nil {
				return algo.Redis{}, err
			}
			return algo.Redis{Lua: []string{"fixedwindow"}, Suffixes: []string{":fw"}, Args: []any{c.Limit, w}}, nil
		},
		Window: func(c Config) time.Duration { return c.Window },
		Params: []algo.Param[Config]{
			algo.Int("limit", func(c *Config) *int { return &c.Limit }),
			algo.Dur("window", func(c *Config) *time.Duration { return &c.Window }),
			algo.QueueOf(func(c *Config) *ratelimit.Queue { return &c.Queue }),
		},
		Describe: func(c Config) string { return fmt.Sprintf("fixed window: %d per %v", c.Limit, algo.Short(c.Window)) },
		// The window's end: ResetAfter, or the next multiple of Window for
		// an empty window.
		Grows: func(c Config, _ int64, reset time.Duration, now time.Time) (time.Duration, bool) {
			if reset > 0 {
				return reset, true
			}
			return algo.UntilNext(now, c.Window), true
		},
	})
}
