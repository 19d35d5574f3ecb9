// Package slidinglog is the exact sliding window: a log of grants, one entry
// per grant (grants at the same instant share one). A request is granted
// when the permits granted in the last Window, plus its own, fit in Limit.
//
// Behaviour: exact. In any interval of length Window, at most Limit permits are
// granted; nothing is admitted early or late, and RetryAfter is the instant the
// oldest grants needed leave the window. The cost is memory: up to 16 bytes per
// grant still in the window (16×Limit bytes per key at worst), and a refusal's
// RetryAfter walks the log from its oldest entry.
package slidinglog

import (
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
)

// Config configures a sliding log limiter.
type Config struct {
	// Limit is the most permits granted in any window of length Window. Required.
	Limit int
	// Window is the window length. Required.
	Window time.Duration
	// Queue configures Wait; the zero value disables queueing.
	Queue ratelimit.Queue
}

const pkg = "slidinglog"

// Validate reports the first invalid field, wrapping ratelimit.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := check.Count(pkg, "Limit", c.Limit, 1); err != nil {
		return err
	}
	if err := check.Duration(pkg, "Window", c.Window); err != nil {
		return err
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Limit.
func (c Config) Capacity() int64 { return int64(c.Limit) }

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// Entry is one grant: Permits granted at instant At (ns since the Unix epoch).
type Entry struct {
	At      int64
	Permits int64
}

// State is the total of the permits in the log, and the log: nil until
// the first grant. Step updates the log in place.
//
// State is two words, so that Go passes it in registers.
type State struct {
	Total int64
	Log   *Log
}

// Log is a ring of entries, oldest at Head, that grows by doubling.
type Log struct {
	Ring []Entry
	Head int
	Len  int
}

func (g *Log) at(i int) *Entry { return &g.Ring[(g.Head+i)%len(g.Ring)] }

func (g *Log) push(e Entry) {
	if g.Len > 0 {
		if last := g.at(g.Len - 1); last.At == e.At {
			last.Permits += e.Permits
			return
		}
	}
	if g.Len == len(g.Ring) {
		grown := make([]Entry, max(4, 2*len(g.Ring)))
		for i := 0; i < g.Len; i++ {
			grown[i] = *g.at(i)
		}
		g.Ring, g.Head = grown, 0
	}
	*g.at(g.Len) = e
	g.Len++
}

// empty reports whether the log holds no entry.
func (s State) empty() bool { return s.Log == nil || s.Log.Len == 0 }

// Model is the reference model of a validated Config.
type Model struct {
	limit  int64
	window int64
}

// NewModel validates c and returns its model.
func NewModel(c Config) (Model, error) {
	if err := c.Validate(); err != nil {
		return Model{}, err
	}
	return Model{limit: int64(c.Limit), window: int64(c.Window)}, nil
}

// Initial is an empty log.
func (m *Model) Initial() State { return State{} }

// expired counts the oldest entries and permits that have left the window at now.
func (m *Model) expired(s State, now int64) (n int, permits int64) {
	if s.Log == nil {
		return 0, 0
	}
	for g := s.Log; n < g.Len; n++ {
		e := g.at(n)
		if e.At+m.window > now {
			break
		}
		permits += e.Permits
	}
	return n, permits
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but dropping expired entries; its RetryAfter is
// when enough of the oldest grants leave the window.
func (m *Model) Step(s State, now, permits int64) (State, ratelimit.Decision) {
	if n, p := m.expired(s, now); n > 0 {
		g := s.Log
		g.Head = (g.Head + n) % len(g.Ring)
		g.Len -= n
		s.Total -= p
	}
	d := ratelimit.Decision{RetryAfter: -1}
	if need := s.Total + max(permits, 1) - m.limit; need <= 0 {
		d.Granted = true
		if permits > 0 {
			if s.Log == nil {
				s.Log = new(Log)
			}
			s.Log.push(Entry{At: now, Permits: permits})
			s.Total += permits
		}
	} else {
		for i, g := 0, s.Log; i < g.Len; i++ { // need > 0: the log holds entries
			e := g.at(i)
			if need -= e.Permits; need <= 0 {
				d.RetryAfter = time.Duration(e.At + m.window - now)
				break
			}
		}
	}
	d.Remaining = m.limit - s.Total
	if !s.empty() {
		d.ResetAfter = time.Duration(s.Log.at(s.Log.Len-1).At + m.window - now)
	}
	return s, d
}

// Available is the number of permits that could be granted at now; it reads s
// without changing it.
func (m *Model) Available(s State, now int64) int64 {
	_, p := m.expired(s, now)
	return m.limit - s.Total + p
}

// InitialAt is the instant from which s, left alone, is an empty log.
func (m *Model) InitialAt(s State) int64 {
	if s.empty() {
		return math.MinInt64
	}
	return s.Log.at(s.Log.Len-1).At + m.window
}
