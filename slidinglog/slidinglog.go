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
// The cost is memory: 16 bytes per grant still in the window (16×Limit bytes
// per key at worst). Time is O(log n) per decision in the n entries of the
// log: each entry holds the running total of the permits granted, so the
// entries that left the window and a refusal's RetryAfter are found by
// binary search.
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

// entry is one grant, or several at one instant: the permits granted up to
// and including it, as a running total (which wraps around; only
// differences are read), at instant at (ns since the Unix epoch).
type entry struct {
	at  int64
	cum uint64
}

// State is the total of the permits in the log, and the log: nil until
// the first decision. Step updates the log in place.
//
// State is two words, so that Go passes it in registers.
type State struct {
	Total int64
	Log   *Log
}

// Log is a ring of entries in time order, oldest at head, that grows by
// doubling, and the latest instant a decision was made at.
type Log struct {
	ring []entry
	head int
	n    int
	base uint64 // the running total before the oldest entry
	last int64  // the latest instant of a decision: grants are recorded no earlier
}

func (g *Log) at(i int) *entry { return &g.ring[(g.head+i)%len(g.ring)] }

// cum is the running total up to and including entry i; base for i == -1.
func (g *Log) cum(i int) uint64 {
	if i < 0 {
		return g.base
	}
	return g.at(i).cum
}

// search returns the smallest i in [0, n) for which f(i) holds, n if none;
// f is false then true over the log's order.
func (g *Log) search(f func(int) bool) int {
	lo, hi := 0, g.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if f(m) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// push records p permits granted at instant t, which is no earlier than
// the newest entry's: in the newest entry when it is at t, else in a new
// entry at t.
func (g *Log) push(t, p int64) {
	if g.n > 0 {
		if last := g.at(g.n - 1); last.at >= t {
			last.cum += uint64(p)
			return
		}
	}
	if g.n == len(g.ring) {
		grown := make([]entry, max(4, 2*len(g.ring)))
		for i := 0; i < g.n; i++ {
			grown[i] = *g.at(i)
		}
		g.ring, g.head = grown, 0
	}
	*g.at(g.n) = entry{at: t, cum: g.cum(g.n-1) + uint64(p)}
	g.n++
}

// drop removes the k oldest entries.
func (g *Log) drop(k int) {
	if k == 0 {
		return
	}
	g.base = g.cum(k - 1)
	g.head = (g.head + k) % len(g.ring)
	g.n -= k
}

// empty reports whether the log holds no entry.
func (s State) empty() bool { return s.Log == nil || s.Log.n == 0 }

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

// Clone returns a copy of s that Step may change without changing s.
func (m *Model) Clone(s State) State {
	if s.Log != nil {
		g := *s.Log
		g.ring = append([]entry(nil), g.ring...)
		s.Log = &g
	}
	return s
}

// expired counts the oldest entries and the permits that have left the
// window at now.
func (m *Model) expired(s State, now int64) (n int, permits int64) {
	if s.empty() {
		return 0, 0
	}
	g := s.Log
	n = g.search(func(i int) bool { return check.Add(g.at(i).at, m.window) > now })
	return n, int64(g.cum(n-1) - g.base)
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but dropping expired entries; its RetryAfter is
// when enough of the oldest grants leave the window.
func (m *Model) Step(s State, now, permits int64) (State, ratelimit.Decision) {
	if s.Log == nil {
		s.Log = &Log{last: now}
	}
	// A decision read at an instant older than one already made is made at
	// that one (at): expiry and the grant's entry; durations stay relative
	// to the caller's now.
	at := max(now, s.Log.last)
	s.Log.last = at
	if n, p := m.expired(s, at); n > 0 {
		s.Log.drop(n)
		s.Total -= p
	}
	d := ratelimit.Decision{RetryAfter: -1}
	if need := s.Total + max(permits, 1) - m.limit; need <= 0 {
		d.Granted = true
		if permits > 0 {
			s.Log.push(at, permits)
			s.Total += permits
		}
	} else { // need > 0: the log holds entries, and more than need permits
		g := s.Log
		i := g.search(func(i int) bool { return int64(g.cum(i)-g.base) >= need })
		d.RetryAfter = time.Duration(check.Add(g.at(i).at, m.window) - now)
	}
	d.Remaining = m.limit - s.Total
	if !s.empty() {
		d.ResetAfter = time.Duration(m.InitialAt(s) - now)
	}
	return s, d
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or the latest instant of a decision, where an older one is recorded.
// A grant's refund takes it as at.
func (m *Model) Made(s State, now int64) int64 {
	if s.Log == nil {
		return now
	}
	return max(now, s.Log.last)
}

// Refund takes back permits granted at instant at, as if they had not
// been granted, while that grant is in the window at now. They come out of
// the oldest entry at or after at: the grant's own, or, for a grant decided
// at an instant older than the log's newest (recorded there), an older
// entry, which leaves the window sooner: stricter, never looser. It
// changes the running totals of the entries after that one: O(entries
// after it), none for the newest grant.
func (m *Model) Refund(s State, now, at, permits int64) State {
	if s.empty() || check.Add(at, m.window) <= now {
		return s // the grant left the window: nothing to take back
	}
	g := s.Log
	i := g.search(func(i int) bool { return g.at(i).at >= at })
	if i == g.n {
		return s
	}
	p := min(uint64(permits), g.cum(i)-g.cum(i-1))
	for j := i; j < g.n; j++ {
		g.at(j).cum -= p
	}
	for g.n > 0 && g.cum(g.n-1) == g.cum(g.n-2) { // the newest entry is empty now
		g.n--
	}
	s.Total -= int64(p)
	return s
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
	return check.Add(s.Log.at(s.Log.n-1).at, m.window)
}
