// Package slidinglog is the exact sliding window: a log of grants, one entry
// per grant (grants at the same instant share one). A request is granted
// when the permits granted in the last Window, plus its own, fit in Limit.
//
// Behaviour: exact. In any interval of length Window, at most Limit permits are
// granted; nothing is admitted early or late, and RetryAfter is the instant the
// oldest grants needed leave the window. A grant decided at an instant older
// than the newest entry's (a clock read before another goroutine decided) is
// recorded at the newest entry's instant: the log stays in order, and such a
// grant stays in the window a little longer, never shorter.
//
// The cost is memory: 16 bytes per instant with grants still in the window
// (16×Limit bytes per key at worst). Time is O(log n) per decision in the n
// entries of the log: each entry holds the running total of the permits
// granted, so the entries that left the window and a refusal's RetryAfter
// are found by binary search.
//
// Reconfigured while it runs (control.Reconfigure), the log's grants
// are held against the new Limit and Window (on Redis, entry by entry: a
// grant leaves at its instant plus the new Window, as a grant made under
// the new config would; in memory, as one entry at the change, which
// leaves no sooner than they would have).
package slidinglog

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
	"github.com/limitkit/ratelimit/internal/timelog"
)

// Config configures a sliding log limiter.
type Config struct {
	// Limit is the most permits granted in any window of length Window. Required.
	Limit int
	// Window is the window length. Required.
	Window time.Duration
	// Queue configures Wait; the zero value waits in arrival order, as
	// long as the ctx of each Wait allows (see ratelimit.Queue).
	Queue ratelimit.Queue
}

const pkg = "slidinglog"

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

// state is the total of the permits in the log, and the log of grants:
// nil until the first decision. Step updates the log in place; Clone
// copies it.
//
// state is two words, so that Go passes it in registers.
type state struct {
	total int64
	log   *timelog.Log
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

// Initial is an empty log.
func (m *model) Initial() state { return state{} }

// Clone returns a copy of s that Step may change without changing s.
func (m *model) Clone(s state) state {
	s.log = s.log.Clone()
	return s
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but dropping expired entries; its RetryAfter is
// when enough of the oldest grants leave the window.
func (m *model) Step(s state, now, permits int64) (state, backend.Decision) {
	if s.log == nil {
		s.log = new(timelog.Log)
	}
	// A decision read at an instant older than one already made is made at
	// that one: expiry and the grant's entry; durations stay relative to the
	// caller's now.
	var d backend.Decision
	s.total, d = s.log.Step(s.total, now, permits, m.limit, m.window, 1)
	return s, d
}

// Used is the number of permits s counts at now, against any limit: a
// reconfigured limiter carries it over (see Holding).
func (m *model) Used(s state, now int64) int64 { return s.total - s.log.Expired(now, m.window) }

// Holding is the state in which used permits, any number, were granted at
// now. A reconfigured limiter carries its count over so.
func (m *model) Holding(now, used int64) state {
	s := state{log: new(timelog.Log)}
	s.total, _ = s.log.Step(0, now, used, used, m.window, 1)
	return s
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or the latest instant of a decision, where an older one is recorded.
// A grant's refund takes it as at.
func (m *model) Made(s state, now int64) int64 {
	if s.log == nil {
		return now
	}
	return s.log.Made(now)
}

// Refund takes back permits granted at instant at, as if they had not
// been granted, while that grant is in the window at now (see
// timelog.Log.Refund).
func (m *model) Refund(s state, now, at, permits int64) state {
	if s.log != nil {
		s.total -= s.log.Refund(now, at, m.window, permits)
	}
	return s
}

// Charge records permits at now without refusing (a settlement's excess),
// over the limit if need be: requests are refused until enough of the
// log leaves the window (see timelog.Log.Charge).
func (m *model) Charge(s state, now, permits int64) state {
	if s.log == nil {
		s.log = new(timelog.Log)
	}
	s.total = s.log.Charge(s.total, now, permits, m.window, 1)
	return s
}

// Available is the number of permits that could be granted at now; it reads
// s without changing it.
func (m *model) Available(s state, now int64) int64 {
	return m.limit - s.total + s.log.Expired(now, m.window)
}

// InitialAt is the instant from which s, left alone, is an empty log.
func (m *model) InitialAt(s state) int64 {
	if s.log.Empty() {
		return math.MinInt64
	}
	return check.Add(s.log.Newest(), m.window)
}

// Caps: grants can be refunded and settled, the log is shared by copies of
// a state, and the count carries over a reconfiguration.
func (m *model) Caps() engine.Caps {
	return engine.Refunds | engine.Clones | engine.Holds | engine.Charges
}

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
			return algo.Redis{Lua: []string{"log", "slidinglog"}, Suffixes: []string{":slc", ":slc:m"}, Args: []any{c.Limit, w}}, nil
		},
		Window: func(c Config) time.Duration { return c.Window },
		Params: []algo.Param[Config]{
			algo.Int("limit", func(c *Config) *int { return &c.Limit }),
			algo.Dur("window", func(c *Config) *time.Duration { return &c.Window }),
			algo.QueueOf(func(c *Config) *ratelimit.Queue { return &c.Queue }),
		},
		Describe: func(c Config) string { return fmt.Sprintf("sliding log: %d per %v", c.Limit, algo.Short(c.Window)) },
		// Window for an empty log (at most Limit in any Window); unknown
		// otherwise: the oldest entry's age is not in the lease.
		Grows: func(c Config, _ int64, reset time.Duration, _ time.Time) (time.Duration, bool) {
			if reset == 0 {
				return c.Window, true
			}
			return 0, false
		},
	})
}
