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
//     900ms are both granted). More segments narrow that edge; memory is 8
//     bytes per segment, and a decision's time grows with Segments.
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
package slidingwindow

import (
	"fmt"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
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
	// Queue configures Wait; the zero value disables queueing.
	Queue ratelimit.Queue
}

const pkg = "slidingwindow"

// Validate reports the first invalid field, wrapping ratelimit.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := check.Count(pkg, "Limit", c.Limit, 1); err != nil {
		return err
	}
	if err := check.Duration(pkg, "Window", c.Window); err != nil {
		return err
	}
	if c.Segments < 0 || c.Segments > MaxSegments {
		return fmt.Errorf("%w: %s: Segments must be in [0, %d], got %d", ratelimit.ErrInvalidConfig, pkg, MaxSegments, c.Segments)
	}
	if c.Segments > 0 && int64(c.Window)%int64(c.Segments) != 0 {
		return fmt.Errorf("%w: %s: Window %v is not a whole multiple of Segments %d nanoseconds", ratelimit.ErrInvalidConfig, pkg, c.Window, c.Segments)
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Limit.
func (c Config) Capacity() int64 { return int64(c.Limit) }

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// State of a sliding window. Segmented: Ring holds the per-segment counts,
// Start is the start of the newest segment and Total the counts' sum.
// Weighted: Start is the current fixed window's start, Total its count and
// Prev the previous window's count. Instants are nanoseconds since the Unix
// epoch. Step updates the Ring in place.
//
// State is four words, so that Go passes it in registers.
type State struct {
	Start int64
	Total int64
	Prev  int64
	Ring  *Ring // segmented only
}

// Ring is the segmented window's counts: Counts[Head] is the newest segment's.
type Ring struct {
	Head   int64
	Counts []int64
}

// Model is the reference model of a validated Config.
type Model struct {
	limit    int64
	window   int64
	segments int64
	seg      int64 // segment length
}

// NewModel validates c and returns its model.
func NewModel(c Config) (Model, error) {
	if err := c.Validate(); err != nil {
		return Model{}, err
	}
	m := Model{limit: int64(c.Limit), window: int64(c.Window), segments: int64(c.Segments)}
	if m.segments > 0 {
		m.seg = m.window / m.segments
	}
	return m, nil
}

// Initial is an empty window.
func (m *Model) Initial() State {
	if m.segments > 0 {
		return State{Ring: &Ring{Counts: make([]int64, m.segments)}}
	}
	return State{}
}

// at moves s forward to now: segments (or windows) that left the window are
// dropped. Segmented states are changed in place.
func (m *Model) at(s State, now int64) State {
	if m.segments == 0 {
		if check.Within(now, s.Start, m.window) {
			return s
		}
		switch start := check.FloorStart(now, m.window); {
		case start <= s.Start:
		case start == s.Start+m.window:
			s = State{Start: start, Prev: s.Total}
		default:
			s = State{Start: start}
		}
		return s
	}
	if check.Within(now, s.Start, m.seg) {
		return s
	}
	start := check.FloorStart(now, m.seg)
	if start <= s.Start {
		return s
	}
	r := s.Ring
	if (start-s.Start)/m.seg >= m.segments {
		clear(r.Counts)
		s.Total = 0
		r.Head = m.index(start)
	} else {
		for t := s.Start + m.seg; t <= start; t += m.seg {
			r.Head = m.next(r.Head)
			s.Total -= r.Counts[r.Head]
			r.Counts[r.Head] = 0
		}
	}
	s.Start = start
	return s
}

// next and prev step a ring index forward and back.
func (m *Model) next(i int64) int64 {
	if i++; i == m.segments {
		return 0
	}
	return i
}

func (m *Model) prev(i int64) int64 {
	if i == 0 {
		return m.segments - 1
	}
	return i - 1
}

func (m *Model) index(start int64) int64 {
	i := (start / m.seg) % m.segments
	if i < 0 {
		i += m.segments
	}
	return i
}

// weight is the weighted form's estimate of the permits in the sliding
// window ending at now, for a state already moved to now.
func (m *Model) weight(s State, now int64) float64 {
	return m.previous(s, now) + float64(s.Total)
}

// previous is the previous window's share of the weight.
func (m *Model) previous(s State, now int64) float64 {
	return float64(s.Prev) * float64(m.window-(now-s.Start)) / float64(m.window)
}

func (m *Model) fits(s State, now, permits int64) bool {
	if m.segments > 0 {
		return s.Total+permits <= m.limit
	}
	// limit - permits is exact in integers; adding permits to the float
	// weight would round above 2^53 and grant past the limit.
	return m.weight(s, now) <= float64(m.limit-permits)
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but dropping what left the window; its RetryAfter
// is exact: the same request is granted after it and refused 1ns earlier.
func (m *Model) Step(s State, now, permits int64) (State, ratelimit.Decision) {
	s = m.at(s, now)
	d := ratelimit.Decision{RetryAfter: -1}
	want := max(permits, 1)
	if m.segments > 0 {
		// s is at now: Available(s, now) is what the ring holds.
		if s.Total+want <= m.limit {
			d.Granted = true
			s.Total += permits
			s.Ring.Counts[s.Ring.Head] += permits
		} else {
			d.RetryAfter = time.Duration(m.earliest(s, now, want) - now)
		}
		d.Remaining = m.limit - s.Total
	} else {
		prev := m.previous(s, now)                          // weight(s, now), computed once
		if prev+float64(s.Total) <= float64(m.limit-want) { // fits(s, now, want)
			d.Granted = true
			s.Total += permits
		} else {
			d.RetryAfter = time.Duration(m.earliest(s, now, want) - now)
		}
		d.Remaining = check.Floor(float64(m.limit) - (prev + float64(s.Total)))
	}
	if at := m.InitialAt(s); at > now {
		d.ResetAfter = time.Duration(at - now)
	}
	return s, d
}

// earliest is the first instant at which permits fit, for s moved to now.
func (m *Model) earliest(s State, now, permits int64) int64 {
	if m.segments > 0 {
		need := s.Total + permits - m.limit
		i := m.next(s.Ring.Head) // the oldest segment
		for t := s.Start - (m.segments-1)*m.seg; t <= s.Start; t += m.seg {
			need -= s.Ring.Counts[i]
			if need <= 0 {
				return check.Add(t, m.window)
			}
			i = m.next(i)
		}
		return check.Add(s.Start, m.window) // unreachable: permits <= limit
	}
	ok := func(t int64) bool {
		// at on a copy: the weighted state holds no slice, so this is pure.
		return m.fits(m.at(s, t), t, permits)
	}
	return check.Earliest(now, check.Add(s.Start, 2*m.window), m.guess(s, permits), ok)
}

// guess solves the weighted form's inequality in floats; earliest refines it.
func (m *Model) guess(s State, permits int64) int64 {
	w := float64(m.window)
	if s.Total+permits <= m.limit && s.Prev > 0 {
		return s.Start + int64(w*(1-float64(m.limit-s.Total-permits)/float64(s.Prev)))
	}
	if s.Total > 0 {
		return s.Start + m.window + int64(w*(1-float64(m.limit-permits)/float64(s.Total)))
	}
	return s.Start + m.window
}

// Clone returns a copy of s that Step may change without changing s.
func (m *Model) Clone(s State) State {
	if s.Ring != nil {
		r := *s.Ring
		r.Counts = append([]int64(nil), r.Counts...)
		s.Ring = &r
	}
	return s
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or the start of the state's newest segment (or window), where an
// older instant counts. A grant's refund takes it as at.
func (m *Model) Made(s State, now int64) int64 { return max(now, s.Start) }

// Refund takes back permits granted at instant at, as if they had not been
// granted, while they still count. A grant at an instant older than the
// state's counted in a later segment (or window) than at's; taking it back
// from at's instead leaves the later one counting it: stricter, never more
// admitted.
func (m *Model) Refund(s State, now, at, permits int64) State {
	if m.segments == 0 {
		switch start := check.FloorStart(at, m.window); {
		case start == s.Start:
			s.Total -= min(permits, s.Total)
		case start == s.Start-m.window:
			s.Prev -= min(permits, s.Prev)
		}
		return s
	}
	start := check.FloorStart(at, m.seg)
	if start > s.Start || start <= s.Start-m.window {
		return s // not counted in the ring (the grant moved the state to at's segment or later)
	}
	i := m.index(start)
	p := min(permits, s.Ring.Counts[i])
	s.Ring.Counts[i] -= p
	s.Total -= p
	return s
}

// Available is the number of permits that could be granted at now. It reads
// s without changing it.
func (m *Model) Available(s State, now int64) int64 {
	if m.segments > 0 {
		total := s.Total
		if now-s.Start >= m.seg { // segments left the window since s
			start := check.FloorStart(now, m.seg)
			if (start-s.Start)/m.seg >= m.segments {
				total = 0
			} else {
				for t, i := s.Start+m.seg, m.next(s.Ring.Head); t <= start; t, i = t+m.seg, m.next(i) {
					total -= s.Ring.Counts[i]
				}
			}
		}
		return m.limit - total
	}
	s = m.at(s, now)
	return check.Floor(float64(m.limit) - m.weight(s, now))
}

// InitialAt is the instant from which s, left alone, is an empty window.
func (m *Model) InitialAt(s State) int64 {
	if m.segments == 0 {
		switch {
		case s.Total > 0:
			return check.Add(s.Start, 2*m.window)
		case s.Prev > 0:
			return check.Add(s.Start, m.window)
		}
		return math.MinInt64
	}
	for t, i := s.Start, s.Ring.Head; t > s.Start-m.window; t, i = t-m.seg, m.prev(i) {
		if s.Ring.Counts[i] != 0 {
			return check.Add(t, m.window)
		}
	}
	return math.MinInt64
}
