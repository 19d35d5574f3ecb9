// Package timelog is the ordered log of grants that the sliding log and
// the segmented sliding window keep: one entry per instant at which
// permits were granted (a segment's start, for the segmented window), in
// time order, each holding the running total of the permits granted up to
// it. A grant leaves the window Window after its entry's instant. The
// running totals make every question a binary search: which entries have
// left the window, and when enough will have left for a request. Redis's
// log.lua keeps the same log.
package timelog

import (
	"time"

	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/check"
)

// entry is the permits granted at instant at, as a running total (which
// wraps around; only differences are read).
type entry struct {
	at  int64
	cum uint64
}

// Log is a ring of entries, oldest at head, that grows by doubling, and
// the latest instant of a decision. The zero Log is empty. Its methods
// that change it are for one goroutine at a time (the limiter's lock).
type Log struct {
	ring []entry
	head int
	n    int
	base uint64 // the running total before the oldest entry
	last int64  // the latest instant of a decision
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
func (g *Log) search(f func(int) bool) int { return g.searchFrom(0, g.n, f) }

// searchFrom is search within [lo, hi).
func (g *Log) searchFrom(lo, hi int, f func(int) bool) int {
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

// Decide records a decision read at now and returns the instant it is made
// at: now, or the latest instant of an earlier decision when now is older
// (a clock read before another goroutine decided). So grants are recorded
// in order, and never earlier than a decision already made.
func (g *Log) Decide(now int64) int64 {
	g.last = max(g.last, now)
	return g.last
}

// Made is the instant a decision read at now was made at, as Decide
// returned it (the log's latest instant, or now when later).
func (g *Log) Made(now int64) int64 { return max(g.last, now) }

// Empty reports whether the log holds no entry.
func (g *Log) Empty() bool { return g == nil || g.n == 0 }

// Newest is the instant of the newest entry; the log must not be empty.
func (g *Log) Newest() int64 { return g.at(g.n - 1).at }

// expired counts the oldest entries, and their permits, that have left a
// window of length window at now.
func (g *Log) expired(now, window int64) (n int, permits int64) {
	if g.Empty() {
		return 0, 0
	}
	in := func(i int) bool { return check.Add(g.at(i).at, window) > now }
	// A gallop from the oldest entry: O(log k) in the k entries that left,
	// mostly none or one, where a binary search over the log would cost
	// O(log n) on every decision (BenchmarkAcquire/slidinglog: 0.94x
	// x/time/rate's time with it, 0.68x with the gallop).
	hi := 1
	for hi < g.n && !in(hi-1) {
		hi = min(2*hi, g.n)
	}
	n = g.searchFrom(hi/2, hi, in)
	return n, int64(g.cum(n-1) - g.base)
}

// Expired is the number of permits that have left the window at now.
func (g *Log) Expired(now, window int64) int64 {
	_, p := g.expired(now, window)
	return p
}

// Drop removes the entries that have left the window at now, and returns
// their permits.
func (g *Log) Drop(now, window int64) int64 {
	k, p := g.expired(now, window)
	if k > 0 {
		g.base = g.cum(k - 1)
		g.head = (g.head + k) % len(g.ring)
		g.n -= k
	}
	return p
}

// Push records p permits granted at instant t, no earlier than the newest
// entry's: in the newest entry when it is at t, else in a new entry.
func (g *Log) Push(t, p int64) {
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

// Freed is the instant at which need permits of the log (need > 0, no more
// than it holds) have left a window of length window: when the oldest
// entries holding them leave it.
func (g *Log) Freed(need, window int64) int64 {
	i := g.search(func(i int) bool { return int64(g.cum(i)-g.base) >= need })
	return check.Add(g.at(i).at, window)
}

// Refund takes back permits granted at instant at, while that grant is in
// the window at now, and returns how many it took back. They come out of
// the oldest entry at or after at: the grant's own when at is the instant
// Decide returned for it; an older at (a raw clock reading) may pick an
// older entry, which leaves the window sooner: stricter, never looser. It
// changes the running totals of the entries after that one: O(entries
// after it), none for the newest grant.
func (g *Log) Refund(now, at, window, permits int64) int64 {
	if g.Empty() || check.Add(at, window) <= now {
		return 0 // the grant left the window: nothing to take back
	}
	i := g.search(func(i int) bool { return g.at(i).at >= at })
	if i == g.n {
		return 0
	}
	p := min(uint64(permits), g.cum(i)-g.cum(i-1))
	for j := i; j < g.n; j++ {
		g.at(j).cum -= p
	}
	for g.n > 0 && g.cum(g.n-1) == g.cum(g.n-2) { // the newest entry is empty now
		g.n--
	}
	return int64(p)
}

// Step decides a request for permits (0: a status check) read at now,
// against limit permits in any window of length window, on a log holding
// total permits, and returns the new total and the decision. A grant is
// recorded at the decision's instant (Decide), taken down to a multiple of
// grain when grain > 1 (a segment's start). A refusal drops only what left
// the window; its RetryAfter is when enough of the oldest grants have.
// Durations are relative to now.
func (g *Log) Step(total, now, permits, limit, window, grain int64) (int64, backend.Decision) {
	at := g.Decide(now)
	total -= g.Drop(at, window)
	d := backend.Decision{RetryAfter: -1}
	if need := total + max(permits, 1) - limit; need <= 0 {
		d.Granted = true
		if permits > 0 {
			if grain > 1 {
				at = check.FloorStart(at, grain)
			}
			g.Push(at, permits)
			total += permits
		}
	} else { // need > 0: the log holds more than need permits
		d.RetryAfter = time.Duration(g.Freed(need, window) - now)
	}
	d.Remaining = max(limit-total, 0) // over the limit after a charge
	if !g.Empty() {
		d.ResetAfter = time.Duration(check.Add(g.Newest(), window) - now)
	}
	return total, d
}

// Charge records permits read at now without refusing (a settlement's
// excess), on a log holding total permits in a window of length window,
// and returns the new total: like a grant (at the decision's instant,
// taken down to a multiple of grain when grain > 1), over the limit if
// need be. The total stops at check.MaxLimit, which keeps the running
// totals' differences exact (on Redis too).
func (g *Log) Charge(total, now, permits, window, grain int64) int64 {
	at := g.Decide(now)
	total -= g.Drop(at, window)
	if p := min(permits, max(check.MaxLimit-total, 0)); p > 0 {
		if grain > 1 {
			at = check.FloorStart(at, grain)
		}
		g.Push(at, p)
		total += p
	}
	return total
}

// Clone returns a copy of g that shares no memory with it.
func (g *Log) Clone() *Log {
	if g == nil {
		return nil
	}
	c := *g
	c.ring = append([]entry(nil), g.ring...)
	return &c
}
