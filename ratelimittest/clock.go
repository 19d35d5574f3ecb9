package ratelimittest

import (
	"sort"
	"sync"
	"time"

	"github.com/limitkit/ratelimit"
)

// Start is the instant a NewClock starts at: a whole multiple of every window
// the suite uses, so windows start where the scenarios expect, and in the
// future (2033), so a context deadline set on the fake clock has not passed
// in real time.
var Start = time.Unix(2_000_000_000, 0)

// Clock is a fake ratelimit.Clock. Time moves only by Advance and Set; the
// functions of timers that come due run in the calling goroutine, in order
// of their due instants, with Now reading each one's instant while it runs.
// So once Advance returns, every waiter the limiter woke has its answer.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	seq    uint64
}

// NewClock returns a Clock reading Start.
func NewClock() *Clock { return NewClockAt(Start) }

// NewClockAt returns a Clock reading t: near the present, for code that
// sets its context deadlines from the real clock (an HTTP server's, say),
// which a limiter compares with its own clock.
func NewClockAt(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, running timers as they come due.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never backwards), running timers as they come due.
func (c *Clock) Set(t time.Time) {
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			a, b := c.timers[i], c.timers[j]
			return a.at.Before(b.at) || (a.at.Equal(b.at) && a.seq < b.seq)
		})
		if len(c.timers) == 0 || c.timers[0].at.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		tm := c.timers[0]
		c.timers = c.timers[1:]
		if tm.at.After(c.now) {
			c.now = tm.at
		}
		c.mu.Unlock()
		tm.f()
	}
}

// Pending reports how many timers are set.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// AfterFunc sets a timer that runs f once the clock reaches Now()+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) ratelimit.Timer {
	t := &timer{c: c, f: f}
	t.Reset(d)
	return t
}

type timer struct {
	c   *Clock
	f   func()
	at  time.Time
	seq uint64
}

func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

func (t *timer) Reset(d time.Duration) bool {
	active := t.Stop()
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t.at, t.seq = c.now.Add(d), c.seq
	c.timers = append(c.timers, t)
	return active
}
