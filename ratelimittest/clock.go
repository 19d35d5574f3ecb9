package ratelimittest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
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
//
// A Clock is safe for concurrent use. WaitForTimers lets a test learn,
// without sleeping, that the goroutines it started are asleep on the clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	seq    uint64
	// changed is closed, and set to nil, when the set of pending timers
	// changes; nil while nobody waits for a change.
	changed chan struct{}
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
		c.notify()
		if tm.at.After(c.now) {
			c.now = tm.at
		}
		c.mu.Unlock()
		tm.f()
	}
}

// Pending reports how many timers are pending: set by AfterFunc or Reset,
// and neither stopped nor come due yet (a timer whose function is running
// is no longer pending).
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are pending (as Pending
// counts them), or ctx is done. It is how a test learns that n goroutines
// are asleep on the clock (each Wait of a limiter that sleeps on a timer,
// say) before it advances the clock: it is woken by every change of the
// pending timers, and never polls. Time does not move while it waits.
//
// It returns nil once n or more timers are pending, at once if they already
// are (so always when n <= 0). When ctx is done first, it returns an error
// that wraps ctx.Err() (errors.Is(err, context.DeadlineExceeded) after a
// timeout) and says how many timers were pending; nil if n were pending
// by then after all.
//
// The count is of timers, not goroutines: a limiter may wake several
// waiters with one timer (the memory backend keeps one per limiter), or
// set one that no goroutine sleeps on.
func (c *Clock) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.timers) >= n {
			c.mu.Unlock()
			return nil
		}
		changed := c.changes()
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			c.mu.Lock()
			pending := len(c.timers)
			c.mu.Unlock()
			if pending >= n {
				return nil
			}
			return fmt.Errorf("ratelimittest: %d of %d timers pending: %w", pending, n, ctx.Err())
		}
	}
}

// changes returns a channel that is closed at the next change of the
// pending timers. Requires c.mu.
func (c *Clock) changes() <-chan struct{} {
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return c.changed
}

// notify wakes whoever waits for a change of the pending timers. Requires
// c.mu.
func (c *Clock) notify() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// TimersChanged returns a channel that is closed at the next change of the
// pending timers (one set, stopped, or come due): a test can wait for a
// limiter to set or stop a timer without polling Pending. Take the channel
// before looking at what it waits for, so that no change is missed.
func (c *Clock) TimersChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes()
}

// AfterFunc sets a timer that runs f once the clock reaches Now()+d;
// stop removes it, and reports whether it was still set.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	t := &timer{c: c, f: f}
	t.reset(d)
	return t.stop
}

type timer struct {
	c   *Clock
	f   func()
	at  time.Time
	seq uint64
}

func (t *timer) stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.notify()
			return true
		}
	}
	return false
}

func (t *timer) reset(d time.Duration) bool {
	active := t.stop()
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t.at, t.seq = c.now.Add(d), c.seq
	c.timers = append(c.timers, t)
	c.notify()
	return active
}
