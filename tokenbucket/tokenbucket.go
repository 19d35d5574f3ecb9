// Package tokenbucket is the token bucket algorithm: a bucket of Burst tokens
// that refills with time; a request takes one token per permit.
//
// Two refill modes:
//
//   - Continuous (Rate set): tokens flow in at Rate per second, exactly as in
//     golang.org/x/time/rate, whose decisions this model reproduces bit for bit
//     on the same arrival times (same float64 arithmetic). Like x/time/rate, a
//     request is granted once its missing tokens are less than one nanosecond
//     of refill away, so RetryAfter may be 1ns below the plain quotient.
//     rate.Inf grants everything. A decision read at an instant older than
//     an earlier decision's (a clock read before another goroutine decided)
//     is made at that earlier instant: the bucket never refills an interval
//     twice, and such a request is never granted more than it would have
//     been a moment later. x/time/rate would refill the interval twice.
//   - Interval (Period and PerPeriod set): PerPeriod tokens are added at every
//     multiple of Period since the Unix epoch, as in .NET's TokenBucketRateLimiter
//     with a replenishment period. Aligning to the epoch makes every replica and
//     every recreated limiter agree on when tokens arrive.
//
// Behaviour: a full bucket admits a burst of Burst permits at once, then Rate per
// second on average; over any interval of length d it admits at most
// Burst + Rate×d (continuous) or Burst + PerPeriod×(refills in d) (interval).
// It never over-admits that bound and under-admits only by refusing work that a
// window limit would have taken during a burst.
//
// Wait reserves: the bucket goes into debt for the waiter, which then sleeps
// until its tokens have arrived; a cancelled reservation refunds its tokens.
// A reservation is due at the same instant at which Acquire would grant the
// same permits (RetryAfter), to the nanosecond.
//
// RetryAfter and ResetAfter stop at the year 2255 (2^53 microseconds after
// the Unix epoch), where a reservation is refused: the longest fill time
// Validate accepts, 100 years, ends long before.
//
// Memory: the state is 24 bytes per key (a token count and two instants).
//
// Reconfigured while it runs (control.Reconfigure), a bucket keeps the
// whole tokens it holds, clamped to the new Burst (as x/time/rate's
// SetBurst), and its debt to queued reservations, which keep their turn; it
// refills at the new rate from then on, and each reservation is served as
// soon as the bucket has repaid its tokens: after a raise of the rate,
// sooner than its waiter was told (on Redis a waiter sleeps until the
// instant it was told). On Redis, where each process applies a new
// configuration from its next call and the state does not record when the
// change came, a change of Rate or Burst that keeps the refill continuous
// reads the bucket as its last decision left it, under the new parameters:
// the time since that decision refills at the new rate, up to the new Burst
// (memory refills it at the old rate up to the change); either way no more
// is admitted than the new configuration allows. A switch between
// continuous (Rate) and interval (Period) refill, or a change of the
// Period, keeps the whole tokens the bucket held when it last decided,
// clamped to the new Burst, and its debt, but refills nothing for the time
// before the change (stricter than either configuration): refill starts
// again at the change (continuous) or at the start of the Period in which
// it falls (interval).
package tokenbucket

import (
	// For the memory engine compiled here: see internal/algo's doc.
	_ "sync"

	"github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/base"

	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/engine"
)

// Config configures a token bucket. Set either Rate (continuous refill) or
// Period and PerPeriod (interval refill), and Burst.
type Config struct {
	// Rate is the continuous refill rate in tokens per second; rate.Inf means
	// no limit: every request is granted, whatever its permits, also beyond
	// Burst (which must still be 1 or more, as for any rate). Must be 0 when
	// Period is set.
	Rate rate.Limit
	// Burst is the bucket's capacity: the most permits granted at once. Required.
	Burst int
	// Period selects interval refill: PerPeriod tokens arrive at each multiple
	// of Period since the Unix epoch.
	Period time.Duration
	// PerPeriod is the number of tokens added each Period.
	PerPeriod int
	// Queue configures Wait; the zero value waits in arrival order, as
	// long as the ctx of each Wait allows (see ratelimit.Queue).
	Queue ratelimit.Queue
}

const pkg = "tokenbucket"

// Validate reports the first invalid field, wrapping ratelimit.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := check.Count(pkg, "Burst", c.Burst, 1); err != nil {
		return err
	}
	if c.Period != 0 || c.PerPeriod != 0 {
		if c.Rate != 0 {
			return fmt.Errorf("%w: %s: set Rate or Period, not both (Rate %v, Period %v)", ratelimit.ErrInvalidConfig, pkg, float64(c.Rate), c.Period)
		}
		if err := check.Duration(pkg, "Period", c.Period); err != nil {
			return err
		}
		if err := check.Count(pkg, "PerPeriod", c.PerPeriod, 1); err != nil {
			return err
		}
	} else {
		r := float64(c.Rate)
		if math.IsNaN(r) || r <= 0 {
			return fmt.Errorf("%w: %s: Rate must be > 0 (or rate.Inf), got %v", ratelimit.ErrInvalidConfig, pkg, r)
		}
		// Filling the whole bucket must take a representable time.
		if !math.IsInf(r, 1) && float64(c.Burst)/r*float64(time.Second) > float64(check.MaxDuration) {
			return fmt.Errorf("%w: %s: Rate %v is too small: filling Burst %d would take more than %v", ratelimit.ErrInvalidConfig, pkg, r, c.Burst, check.MaxDuration)
		}
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Burst; math.MaxInt64 for rate.Inf, which grants every
// request, whatever its permits (as x/time/rate does).
func (c Config) Capacity() int64 {
	if c.Rate == rate.Inf {
		return math.MaxInt64
	}
	return int64(c.Burst)
}

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// state is a bucket's state: the tokens at instant Last (continuous), or the
// tokens after the refill at Last (interval; Last is a multiple of Period),
// and Seen, the latest instant a decision was made at: a decision read at
// an older instant is made at Seen. Instants are nanoseconds since the
// Unix epoch.
type state struct {
	Tokens float64
	Last   int64
	Seen   int64
}

// model is the reference model of a validated Config: pure functions from a
// state, an instant and a request to the next state and a decision.
type model struct {
	engine.Defaults[state]         // the optional methods its Caps leave out
	limit                  float64 // tokens per second; 0 in interval mode
	perToken               float64 // nanoseconds per token, for header figures
	inf                    bool
	burst                  int64
	period                 int64 // interval mode when > 0
	perPeriod              int64
}

// newModel validates c and returns its model.
func newModel(c Config) (model, error) {
	if err := c.Validate(); err != nil {
		return model{}, err
	}
	return model{
		limit:     float64(c.Rate),
		perToken:  float64(time.Second) / float64(c.Rate),
		inf:       c.Rate == rate.Inf,
		burst:     int64(c.Burst),
		period:    int64(c.Period),
		perPeriod: int64(c.PerPeriod),
	}, nil
}

// Initial is the state of a new limiter: a full bucket.
func (m *model) Initial() state { return state{Tokens: float64(m.burst)} }

// tokensAt is the bucket's content at now, before any request (x/time/rate's
// advance), made at Seen when now is older.
func (m *model) tokensAt(s state, now int64) state {
	now = max(now, s.Seen)
	s.Seen = now
	if m.period > 0 {
		tick := check.FloorStart(now, m.period)
		if s.Tokens < float64(m.burst) && tick > s.Last {
			refills := (tick - s.Last) / m.period
			missing := m.burst - int64(s.Tokens) // s.Tokens is integral here
			if refills >= check.CeilDiv(missing, m.perPeriod) {
				s.Tokens = float64(m.burst)
			} else {
				s.Tokens += float64(refills * m.perPeriod)
			}
		}
		s.Last = max(s.Last, tick)
		return s
	}
	if now <= s.Last {
		return s
	}
	tokens := s.Tokens + seconds(now-s.Last)*m.limit
	if b := float64(m.burst); tokens > b {
		tokens = b
	}
	return state{Tokens: tokens, Last: now, Seen: now}
}

// Used is the number of tokens missing from a full bucket at now (the
// whole tokens it holds taken from Burst; more than Burst when the bucket
// is in debt): a reconfigured limiter carries it over (see Holding). For
// rate.Inf, which grants without reading its state, it is only the debt
// the bucket still owes to reservations made before (whole tokens,
// rounded up): what a finite configuration after it must not give away.
func (m *model) Used(s state, now int64) int64 {
	if m.inf {
		return max(0, -int64(math.Floor(s.Tokens)))
	}
	return m.burst - int64(math.Floor(m.tokensAt(s, now).Tokens))
}

// Holding is the bucket after used tokens, any number, were taken from a
// full one at now: Burst - used tokens (a debt when used is larger). A
// reconfigured limiter carries its tokens over so.
func (m *model) Holding(now, used int64) state {
	last := now
	if m.period > 0 {
		last = check.FloorStart(now, m.period)
	}
	return state{Tokens: float64(m.burst - used), Last: last, Seen: now}
}

// seconds is time.Duration(d).Seconds() for d >= 0, bit for bit. Below a
// second, the common case between decisions, Seconds adds its whole
// seconds, 0, to float64(d)/1e9, which changes nothing: skipping the split
// into seconds and nanoseconds shortens the chain of dependent operations
// that every decision waits on.
func seconds(d int64) float64 {
	if d < int64(time.Second) {
		return float64(d) / 1e9
	}
	return time.Duration(d).Seconds()
}

// durationFromTokens is x/time/rate's conversion of a token count to the
// time it takes to accumulate them, in float nanoseconds (which do not
// overflow).
func (m *model) durationFromTokens(tokens float64) float64 {
	return (tokens / m.limit) * float64(time.Second)
}

// dueAt is the instant a bucket left with s (moved to now) after a take has
// repaid its debt, to within the 1ns of fits: now when it is not in debt.
// It is where When's search starts.
func (m *model) dueAt(s state, now int64) int64 {
	if s.Tokens >= 0 {
		return now
	}
	if m.period > 0 {
		return m.afterRefills(s.Last, check.CeilDiv(int64(math.Ceil(-s.Tokens)), m.perPeriod))
	}
	return check.AddFloat(max(s.Last, now), m.durationFromTokens(-s.Tokens))
}

// Step decides a request for permits at now. permits == 0 is a status check:
// granted when at least one token is available, and the state is unchanged.
// A refusal leaves the state unchanged and carries the exact RetryAfter: the
// same request is granted at now+RetryAfter and refused one nanosecond earlier.
func (m *model) Step(s state, now, permits int64) (state, backend.Decision) {
	d := backend.Decision{RetryAfter: -1}
	if m.inf {
		d.Granted, d.Remaining = true, -1 // no limit
		return s, d
	}
	cur := m.tokensAt(s, now)
	want := max(permits, 1)
	after := cur
	after.Tokens -= float64(want)
	s.Seen = cur.Seen // what else a refusal or a status check changes: nothing
	if m.fits(after) {
		d.Granted = true
		if permits > 0 {
			s = after
			cur = after
		}
	} else {
		d.RetryAfter = time.Duration(m.When(s, now, want) - now)
	}
	d.Remaining = check.Floor(cur.Tokens)
	d.ResetAfter = m.resetAfter(cur, now)
	return s, d
}

// resetAfter is how long until the bucket left at cur (moved to now, so
// cur.Last >= now) is full again, rounded up to the nanosecond; the closed
// form of InitialAt, for headers.
func (m *model) resetAfter(cur state, now int64) time.Duration {
	missing := float64(m.burst) - cur.Tokens
	switch {
	case missing <= 0:
		return 0
	case m.period > 0:
		return time.Duration(m.InitialAt(cur) - now)
	}
	// A comparison, not math.Min, which is a call: missing*m.perToken is
	// never NaN here.
	ns := missing * m.perToken
	if left := float64(check.Far - cur.Last); ns > left {
		ns = left
	}
	return time.Duration(check.Ceil(ns) + cur.Last - now)
}

// afterRefills is the instant of the n-th refill after the one at last
// (interval mode), saturating at Far: Burst refills of 100 years each
// would overflow.
func (m *model) afterRefills(last, n int64) int64 {
	if n > (check.Far-last)/m.period {
		return check.Far
	}
	return last + n*m.period
}

// fits reports whether a bucket left with s after a take is within its means:
// like x/time/rate, it grants when the debt would be repaid in under 1ns.
// The debt's duration is compared as a float: converted to a Duration, a
// debt of more than 292 years would overflow to a negative number.
func (m *model) fits(s state) bool {
	return s.Tokens >= 0 || (m.period == 0 && m.durationFromTokens(-s.Tokens) < 1)
}

// When is the earliest instant, from now on, at which need tokens can be
// taken from s, by the rule Step grants by; Far when none before it. need
// may be zero or negative: s then holds the debt of -need tokens reserved
// after the reservation whose turn is asked (the memory queue's). Step's
// RetryAfter is When(s, now, permits) - now.
func (m *model) When(s state, now, need int64) int64 {
	if m.inf {
		return now
	}
	cur := m.tokensAt(s, now)
	cur.Tokens -= float64(need)
	if m.fits(cur) {
		return now
	}
	if m.period > 0 {
		return m.dueAt(cur, now) // exact in integers
	}
	ok := func(t int64) bool {
		a := m.tokensAt(s, t)
		a.Tokens -= float64(need)
		return m.fits(a)
	}
	return check.Earliest(now, check.Far, m.dueAt(cur, now), ok)
}

// Reserve takes permits at now even if that puts the bucket into debt, and
// returns the instant the reservation may proceed: When(s, now, permits),
// the instant Acquire would grant them. ok is false, and s is returned
// unchanged, when that instant is Far: a wait that cannot be represented.
// The caller bounds the debt (the memory backend by its queue limit).
func (m *model) Reserve(s state, now, permits int64) (next state, due int64, ok bool) {
	if m.inf {
		return s, now, true
	}
	if due = m.When(s, now, permits); due >= check.Far {
		return s, due, false
	}
	s = m.tokensAt(s, now)
	s.Tokens -= float64(permits)
	return s, due, true
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or Seen for an older instant. A grant's refund takes it as at.
func (m *model) Made(s state, now int64) int64 { return max(now, s.Seen) }

// Refund gives back permits taken at instant at, at now or earlier: a
// cancelled reservation's (at is then the cancel's instant: while a
// reservation waits, the bucket is in debt and loses nothing to the
// burst), or a grant being rolled back. Had the permits not been taken,
// the bucket could have lost some of them to its burst as it refilled.
// From the state's last refill to now that loss is replayed exactly (the
// permits go back before that refill, which clamps); before it, from at,
// it is not known, and as much as refilled then is held back. So the
// bucket never holds more than if the grant had not been made, and holds
// exactly that when no decision came between the grant and the refund.
// A grant decided at an instant older than the bucket's (made at Seen)
// is refunded as if made at at: stricter, never looser.
func (m *model) Refund(s state, now, at, permits int64) state {
	if m.inf {
		return s
	}
	credit := float64(permits)
	if m.period > 0 {
		if tick := check.FloorStart(at, m.period); s.Last > tick {
			credit -= float64((s.Last - tick) / m.period * m.perPeriod)
		}
	} else if s.Last > at {
		credit -= seconds(s.Last-at) * m.limit
	}
	if credit > 0 {
		s.Tokens = math.Min(s.Tokens+credit, float64(m.burst))
	}
	return m.tokensAt(s, now)
}

// Charge takes permits at now even when the bucket holds fewer (a
// settlement's excess): it goes into debt, which later requests wait for
// as they wait for a reservation's (their RetryAfter counts it). The
// bucket never owes more than check.MaxLimit tokens short of full for a
// charge: past that, a charge takes nothing more (and never gives
// anything back). rate.Inf takes nothing.
func (m *model) Charge(s state, now, permits int64) state {
	if m.inf {
		return s
	}
	s = m.tokensAt(s, now)
	floor := float64(m.burst - check.MaxLimit) // exact: burst <= 2^53
	if t := s.Tokens - float64(permits); t > floor {
		s.Tokens = t
	} else if s.Tokens > floor {
		s.Tokens = floor
	}
	return s
}

// Available is the number of whole tokens in the bucket at now;
// math.MaxInt64 for rate.Inf.
func (m *model) Available(s state, now int64) int64 {
	if m.inf {
		return math.MaxInt64
	}
	return check.Floor(m.tokensAt(s, now).Tokens)
}

// InitialAt is the instant from which s, left alone, equals the initial state
// (a full bucket); math.MinInt64 when it already does.
func (m *model) InitialAt(s state) int64 {
	if m.inf || s.Tokens >= float64(m.burst) {
		return math.MinInt64
	}
	if m.period > 0 {
		missing := m.burst - int64(math.Floor(s.Tokens))
		return m.afterRefills(s.Last, check.CeilDiv(missing, m.perPeriod))
	}
	full := func(t int64) bool { return m.tokensAt(s, t).Tokens >= float64(m.burst) }
	guess := check.AddFloat(s.Last, m.durationFromTokens(float64(m.burst)-s.Tokens))
	return check.Earliest(s.Last, check.Far, guess, full)
}

// Caps: Wait reserves, grants can be refunded and settled, and the
// tokens carry over a reconfiguration.
func (m *model) Caps() engine.Caps {
	return engine.Reserves | engine.Refunds | engine.Holds | engine.Charges
}

func init() {
	algo.Register(&algo.Algorithm[Config, state]{
		Name: pkg,
		Model: func(c Config) (engine.Model[state], error) {
			m, err := newModel(c)
			return &m, err
		},
		Redis: func(c Config, _ algo.RedisOptions) (algo.Redis, error) {
			period, err := algo.Micros("Period", c.Period)
			if err != nil {
				return algo.Redis{}, err
			}
			return algo.Redis{Lua: []string{"tokenbucket"}, Suffixes: []string{":tb"}, Unlimited: c.Rate == rate.Inf,
				Args: []any{algo.LuaNumber(float64(c.Rate)), c.Burst, period, c.PerPeriod, check.QueueLimit(c.Queue), int(c.Queue.Order)}}, nil
		},
		// The time to fill from empty.
		Window: func(c Config) time.Duration {
			if c.Period > 0 && c.PerPeriod > 0 {
				return time.Duration(check.CeilDiv(int64(c.Burst), int64(c.PerPeriod))) * c.Period
			}
			if c.Rate > 0 && c.Rate != rate.Inf {
				return time.Duration(math.Ceil(float64(c.Burst) / float64(c.Rate) * float64(time.Second)))
			}
			return 0
		},
		Params: []algo.Param[Config]{
			algo.PerSecond("rate", func(c *Config) *rate.Limit { return &c.Rate }),
			algo.Int("burst", func(c *Config) *int { return &c.Burst }),
			algo.Dur("period", func(c *Config) *time.Duration { return &c.Period }),
			algo.Int("per_period", func(c *Config) *int { return &c.PerPeriod }),
			algo.QueueOf(func(c *Config) *ratelimit.Queue { return &c.Queue }),
		},
		Describe: func(c Config) string {
			if c.Period > 0 {
				return fmt.Sprintf("token bucket: %d every %v, burst %d", c.PerPeriod, algo.Short(c.Period), c.Burst)
			}
			return fmt.Sprintf("token bucket: %g/s, burst %d", float64(c.Rate), c.Burst)
		},
		// The next refill (interval), or the time until the next whole
		// token: ResetAfter modulo one token's time (one token's time for
		// a full bucket). Unknown for rate.Inf.
		Grows: func(c Config, _ int64, reset time.Duration, now time.Time) (time.Duration, bool) {
			if c.Period > 0 {
				if reset > 0 {
					if r := reset % c.Period; r > 0 {
						return r, true
					}
					return c.Period, true
				}
				return algo.UntilNext(now, c.Period), true
			}
			if c.Rate == rate.Inf || c.Rate <= 0 {
				return 0, false
			}
			return algo.NextToken(reset, float64(time.Second)/float64(c.Rate)), true
		},
	})
}
