// Package slidingwindow is the sliding window algorithm, in two forms:
//
//   - Segmented (Segments > 0), as .NET's SlidingWindowRateLimiter: the window
//     is split into Segments equal segments aligned to the Unix epoch; a grant
//     counts in the segment it falls in, and comes back when that segment
//     leaves the window. It never admits more than Limit in any interval of
//     Window−Window/Segments (one segment less than a window), nor in any
//     window of Window's length that starts on a segment boundary. An
//     arbitrary interval of Window's length overlaps Segments+1 segments, so
//     it may see up to 2×Limit: Limit at the end of a segment, and Limit
//     again when that segment leaves the window, Window−Window/Segments
//     later (Limit 10, Window 500ms, 5 segments: Acquire(10) at 450ms and at
//     900ms are both granted). More segments narrow that edge. It is the
//     sliding log's log with instants taken to their segment's start: 16
//     bytes per segment with grants in the window, and O(log n) time per
//     decision in those n segments, whatever Segments is.
//   - Weighted (Segments == 0), the two-window counter: the count of the
//     previous fixed window is weighted by how much of it the sliding window
//     still overlaps, plus the current window's count. An approximation that
//     assumes the previous window's grants were spread evenly: it may admit
//     somewhat more than Limit in a sliding window when they were bunched at
//     its end, and fewer when bunched at its start. Memory: 24 bytes per key.
//
// Both smooth the fixed window's boundary burst at a modest cost; RetryAfter
// is exact for the model. A decision at an instant older than the state's
// newest segment (or window) counts in it: never more is admitted for it.
//
// Reconfigured while it runs (control.Reconfigure), the permits counted
// at the change stay counted, against the new Limit, until the segment (or
// window) in which the change falls leaves the window; Window and Segments
// may change too. On Redis, a change of the weighted window's length holds
// the old estimate at the change, rounded up, as the count of the new
// window in which it falls; the segmented form keeps its segments'
// entries, which leave at their start plus the new Window, unless the
// segment length changed: then what the old window holds is counted in the
// new segment in which the change falls, as in memory. A switch between
// the weighted and segmented forms (Segments 0 and not) carries the count
// too, in memory and on Redis alike: what the old form counts at the
// change (the weighted estimate rounded up, or the log's permits in its
// window) is held in the new form's window or segment in which the change
// falls; on Redis the old form's keys are then deleted, so that a switch
// back counts nothing twice.
package slidingwindow

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

// MaxSegments bounds Config.Segments.
const MaxSegments = 1 << 16

// Config configures a sliding window limiter.
type Config struct {
	// Limit is the most permits granted per window. Required.
	Limit int
	// Window is the sliding window's length. Required; with Segments > 0 it
	// must be a whole multiple of Segments nanoseconds.
	Window time.Duration
	// Segments splits the window for the segmented form; 0 selects the
	// weighted two-window counter.
	Segments int
	// Queue configures Wait; the zero value waits in arrival order, as
	// long as the ctx of each Wait allows (see ratelimit.Queue).
	Queue ratelimit.Queue
}

const pkg = "slidingwindow"

// Validate reports the first invalid field, wrapping ratelimit.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := check.LimitWindow(pkg, c.Limit, c.Window); err != nil {
		return err
	}
	if c.Segments < 0 || c.Segments > MaxSegments {
		return fmt.Errorf("%w: %s: Segments must be in [0, %d], got %d", ratelimit.ErrInvalidConfig, pkg, MaxSegments, c.Segments)
	}
	if c.Segments > 0 && int64(c.Window)%int64(c.Segments) != 0 {
		return fmt.Errorf("%w: %s: Window %v must split into Segments %d of whole nanoseconds", ratelimit.ErrInvalidConfig, pkg, c.Window, c.Segments)
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Limit.
func (c Config) Capacity() int64 { return int64(c.Limit) }

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// state of a sliding window. Segmented: the log of the segments with
// grants (entries at segment starts) and their total. Weighted: the
// current fixed window's start, its count and the previous window's
// count. Instants are nanoseconds since the Unix epoch. Step updates the
// log in place; Clone copies it.
//
// state is four words, so that Go passes it in registers.
type state struct {
	start int64 // weighted only
	total int64
	prev  int64        // weighted only
	log   *timelog.Log // segmented only
}

// model is the reference model of a validated Config.
type model struct {
	engine.Defaults[state] // the optional methods its Caps leave out
	limit                  int64
	window                 int64
	segments               int64
	seg                    int64 // segment length
}

// newModel validates c and returns its model.
func newModel(c Config) (model, error) {
	if err := c.Validate(); err != nil {
		return model{}, err
	}
	m := model{limit: int64(c.Limit), window: int64(c.Window), segments: int64(c.Segments)}
	if m.segments > 0 {
		m.seg = m.window / m.segments
	}
	return m, nil
}

// Initial is an empty window.
func (m *model) Initial() state { return state{} }

// at moves a weighted state forward to now: the current window becomes the
// previous one, or both are dropped. An older instant counts in the
// state's window.
func (m *model) at(s state, now int64) state {
	switch start := check.FloorStart(now, m.window); {
	case start <= s.start:
	case start == s.start+m.window:
		s = state{start: start, prev: s.total}
	default:
		s = state{start: start}
	}
	return s
}

// weight is the weighted form's estimate of the permits in the sliding
// window ending at now, for a state already moved to now.
func (m *model) weight(s state, now int64) float64 {
	return m.previous(s, now) + float64(s.total)
}

// previous is the previous window's share of the weight.
func (m *model) previous(s state, now int64) float64 {
	return float64(s.prev) * float64(m.window-(now-s.start)) / float64(m.window)
}

// fits reports whether permits fit in the weighted window at now. limit -
// permits is exact in integers; adding permits to the float weight would
// round above 2^53 and grant past the limit.
func (m *model) fits(s state, now, permits int64) bool {
	return m.weight(s, now) <= float64(m.limit-permits)
}

// Used is the number of permits s counts at now, against any limit
// (rounded up in the weighted form): a reconfigured limiter carries it
// over (see Holding).
func (m *model) Used(s state, now int64) int64 {
	if m.segments > 0 {
		return s.total - s.log.Expired(now, m.window)
	}
	s = m.at(s, now)
	return int64(math.Ceil(m.weight(s, now)))
}

// Holding is the state in which used permits, any number, were taken at
// now: they count in now's window (weighted) or segment (segmented). A
// reconfigured limiter carries its count over so.
func (m *model) Holding(now, used int64) state {
	if m.segments == 0 {
		return state{start: check.FloorStart(now, m.window), total: used}
	}
	s := state{log: new(timelog.Log)}
	s.total, _ = s.log.Step(0, now, used, used, m.window, m.seg)
	return s
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but dropping what left the window; its RetryAfter
// is exact: the same request is granted after it and refused 1ns earlier.
func (m *model) Step(s state, now, permits int64) (state, backend.Decision) {
	if m.segments > 0 {
		return m.stepSegmented(s, now, permits)
	}
	s = m.at(s, now)
	d := backend.Decision{RetryAfter: -1}
	want := max(permits, 1)
	prev := m.previous(s, now)                          // weight(s, now), computed once
	if prev+float64(s.total) <= float64(m.limit-want) { // fits(s, now, want)
		d.Granted = true
		s.total += permits
	} else {
		d.RetryAfter = time.Duration(m.earliest(s, now, want) - now)
	}
	d.Remaining = check.Floor(float64(m.limit) - (prev + float64(s.total)))
	if at := m.InitialAt(s); at > now {
		d.ResetAfter = time.Duration(at - now)
	}
	return s, d
}

// stepSegmented is Step for the segmented form: a sliding log whose grants
// are recorded at their segment's start, and so leave the window when
// their segment does. A decision read at an instant older than one already
// made is made at that one, in its segment.
func (m *model) stepSegmented(s state, now, permits int64) (state, backend.Decision) {
	if s.log == nil {
		s.log = new(timelog.Log)
	}
	var d backend.Decision
	s.total, d = s.log.Step(s.total, now, permits, m.limit, m.window, m.seg)
	return s, d
}

// earliest is the first instant at which permits fit in the weighted
// window, for s moved to now.
func (m *model) earliest(s state, now, permits int64) int64 {
	ok := func(t int64) bool {
		// at on a copy: the weighted state holds no pointer, so this is pure.
		return m.fits(m.at(s, t), t, permits)
	}
	return check.Earliest(now, check.Add(s.start, 2*m.window), m.guess(s, permits), ok)
}

// guess solves the weighted form's inequality in floats; earliest refines it.
func (m *model) guess(s state, permits int64) int64 {
	w := float64(m.window)
	if s.total+permits <= m.limit && s.prev > 0 {
		return s.start + int64(w*(1-float64(m.limit-s.total-permits)/float64(s.prev)))
	}
	if s.total > 0 {
		return s.start + m.window + int64(w*(1-float64(m.limit-permits)/float64(s.total)))
	}
	return s.start + m.window
}

// Clone returns a copy of s that Step may change without changing s.
func (m *model) Clone(s state) state {
	s.log = s.log.Clone()
	return s
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or the latest instant of a decision (segmented) or the start of the
// state's window (weighted), where an older instant counts. A grant's
// refund takes it as at.
func (m *model) Made(s state, now int64) int64 {
	if m.segments > 0 {
		if s.log == nil {
			return now
		}
		return s.log.Made(now)
	}
	return max(now, s.start)
}

// Refund takes back permits granted at instant at, as if they had not been
// granted, while they still count. Segmented: from the grant's segment, as
// timelog.Log.Refund. Weighted: from the window at counts in (a grant at
// an instant older than the state's counted in a later window than at's;
// taking it back from at's instead leaves the later one counting it:
// stricter, never more admitted).
func (m *model) Refund(s state, now, at, permits int64) state {
	if m.segments > 0 {
		if s.log != nil {
			s.total -= s.log.Refund(now, check.FloorStart(at, m.seg), m.window, permits)
		}
		return s
	}
	switch start := check.FloorStart(at, m.window); {
	case start == s.start:
		s.total -= min(permits, s.total)
	case start == s.start-m.window:
		s.prev -= min(permits, s.prev)
	}
	return s
}

// Charge counts permits at now without refusing (a settlement's excess),
// over the limit if need be: segmented, in now's segment of the log (see
// timelog.Log.Charge); weighted, in now's window, whose count stops at
// check.MaxLimit. Requests are then refused until the estimate or the
// log's window has room again.
func (m *model) Charge(s state, now, permits int64) state {
	if m.segments > 0 {
		if s.log == nil {
			s.log = new(timelog.Log)
		}
		s.total = s.log.Charge(s.total, now, permits, m.window, m.seg)
		return s
	}
	s = m.at(s, now)
	s.total = check.Charged(s.total, permits)
	return s
}

// Available is the number of permits that could be granted at now. It reads
// s without changing it.
func (m *model) Available(s state, now int64) int64 {
	if m.segments > 0 {
		return m.limit - s.total + s.log.Expired(now, m.window)
	}
	s = m.at(s, now)
	return check.Floor(float64(m.limit) - m.weight(s, now))
}

// InitialAt is the instant from which s, left alone, is an empty window.
func (m *model) InitialAt(s state) int64 {
	if m.segments > 0 {
		if s.log.Empty() {
			return math.MinInt64
		}
		return check.Add(s.log.Newest(), m.window)
	}
	switch {
	case s.total > 0:
		return check.Add(s.start, 2*m.window)
	case s.prev > 0:
		return check.Add(s.start, m.window)
	}
	return math.MinInt64
}

// Caps: grants can be refunded and settled, the segments' log is shared by
// copies of a state, and the count carries over a reconfiguration.
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
			if c.Segments > 0 && w%int64(c.Segments) != 0 {
				return algo.Redis{}, fmt.Errorf("%w: redis: Segments %d must split Window %v into segments of whole microseconds", ratelimit.ErrInvalidConfig, c.Segments, c.Window)
			}
			// Both forms declare each other's keys, to convert the other's
			// state after a switch (see the redis package's slidingwindow.lua).
			return algo.Redis{Lua: []string{"log", "slidingwindow"}, Suffixes: []string{":sw", ":sgc", ":sgc:m"}, Args: []any{c.Limit, w, c.Segments}}, nil
		},
		Window: func(c Config) time.Duration { return c.Window },
		Params: []algo.Param[Config]{
			algo.Int("limit", func(c *Config) *int { return &c.Limit }),
			algo.Dur("window", func(c *Config) *time.Duration { return &c.Window }),
			algo.Int("segments", func(c *Config) *int { return &c.Segments }),
			algo.QueueOf(func(c *Config) *ratelimit.Queue { return &c.Queue }),
		},
		Describe: func(c Config) string {
			if c.Segments > 0 {
				return fmt.Sprintf("sliding window, %d segments: %d per %v", c.Segments, c.Limit, algo.Short(c.Window))
			}
			return fmt.Sprintf("sliding window, weighted: %d per %v", c.Limit, algo.Short(c.Window))
		},
		// Segmented: the next segment boundary, where the oldest segment's
		// grants leave the window (a lower bound when that segment had
		// none). Weighted: unknown.
		Grows: func(c Config, _ int64, _ time.Duration, now time.Time) (time.Duration, bool) {
			if c.Segments > 0 {
				return algo.UntilNext(now, c.Window/time.Duration(c.Segments)), true
			}
			return 0, false
		},
	})
}
