// Package quota is the calendar quota: at most Limit permits in each
// calendar period (a day, a week, a month or a year) of a time zone, as
// API plans are sold ("1,000 calls a day, 10,000 a month"), beside the
// short-term limits of the other algorithms.
//
// A period starts at the first instant of its first local date in the
// zone: a day is its real length (23 or 25 hours across a DST change, 23.5
// or 24.5 on Lord Howe Island), a month or a year its own, and a day
// whose midnight the clocks skip (DST starting at 00:00, as in Havana or
// Santiago) starts when the clocks reach it. The time zone is an IANA name
// (time.LoadLocation); "" is UTC. "Local" is refused: it differs from host
// to host, and the processes of a fleet would disagree on the periods.
// Every process must read the same time zone database (a system's, or
// time/tzdata's embedded in the program) for the periods of a rule that
// changed; the boundaries are those of the database of the process that
// decides.
//
// Behaviour: as a fixed window whose windows are the periods. It grants
// while the period's count plus the request is at most Limit, and never
// admits more than Limit in one period; a client may take Limit at the end
// of a period and Limit more at the start of the next. A refusal's
// RetryAfter is the time to the period's end, when the whole Limit is
// available again (Wait sleeps until then, or is refused at once when its
// ctx's deadline comes sooner); the RateLimit header field's t of a quota
// is the time to the period's end. A decision at an instant older than the
// state's period (a clock read before another goroutine decided) counts in
// the state's period. The state is one count and the period's bounds per
// key (24 bytes); a decision computes the calendar only when a period
// ends, once per process and configuration, not once per key.
//
// On Redis the time zone database is the caller's: each call sends the
// boundaries of the previous, current and next periods around the caller's
// clock, and the script picks the one Redis's TIME falls in, so processes
// whose clocks are ahead of Redis's or behind it (by less than a period)
// agree on every decision near a boundary. A caller whose clock is more
// than a period away from Redis's gets an error.
//
// Reconfigured while it runs (control.Reconfigure), the permits counted
// in the current period stay counted, against the new Limit, until the
// period of the new configuration in which the change falls ends (another
// Period, Timezone or WeekStart changes the periods; on Redis too: a count
// whose period has not ended when the change is first read is held in the
// new period; one whose period has ended is gone).
package quota

import (
	// For the memory engine compiled here: see internal/algo's doc.
	_ "sync"

	"github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/base"

	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/engine"
)

// Period is a calendar period: Day, Week, Month or Year.
type Period string

// The periods a quota counts in.
const (
	Day   Period = "day"   // from a local date's first instant to the next date's
	Week  Period = "week"  // seven dates from Config.WeekStart
	Month Period = "month" // from the 1st of a month to the 1st of the next
	Year  Period = "year"  // from January 1st to the next
)

var periods = []string{string(Day), string(Week), string(Month), string(Year)}

// weekdays are the JSON names of the days of the week, Sunday first as
// time.Weekday counts.
var weekdays = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// Config configures a calendar quota.
type Config struct {
	// Limit is the most permits granted per period. Required.
	Limit int
	// Period is the calendar period counted in. Required.
	Period Period
	// WeekStart is the first day of a week, for Period Week (time.Monday
	// for ISO 8601 weeks); its zero value is time.Sunday, as time.Weekday
	// counts. Another Period refuses a WeekStart other than Sunday.
	WeekStart time.Weekday
	// Timezone names the IANA time zone of the periods ("Europe/Paris");
	// "" is UTC. "Local" is refused (see the package doc).
	Timezone string
	// Queue configures Wait; the zero value waits in arrival order, as
	// long as the ctx of each Wait allows (see ratelimit.Queue).
	Queue ratelimit.Queue
}

const pkg = "quota"

// Validate reports the first invalid field, wrapping
// ratelimit.ErrInvalidConfig, with the value given: a Limit outside [1,
// 2^53], a Period that is none of Day, Week, Month and Year, a WeekStart
// that is no day of the week (or not Sunday for another Period than
// Week), a Timezone that time.LoadLocation does not find, or "Local".
func (c Config) Validate() error {
	if err := check.Count(pkg, "Limit", c.Limit, 1); err != nil {
		return err
	}
	switch c.Period {
	case Day, Week, Month, Year:
	case "":
		return fmt.Errorf("%w: %s: Period is required: one of %s", ratelimit.ErrInvalidConfig, pkg, strings.Join(periods, ", "))
	default:
		return fmt.Errorf("%w: %s: Period %q must be one of %s", ratelimit.ErrInvalidConfig, pkg, string(c.Period), strings.Join(periods, ", "))
	}
	if c.WeekStart < time.Sunday || c.WeekStart > time.Saturday {
		return fmt.Errorf("%w: %s: WeekStart %d is not a day of the week (time.Sunday to time.Saturday)", ratelimit.ErrInvalidConfig, pkg, int(c.WeekStart))
	}
	if c.WeekStart != time.Sunday && c.Period != Week {
		return fmt.Errorf("%w: %s: WeekStart %v applies to weekly periods only, and Period is %q", ratelimit.ErrInvalidConfig, pkg, c.WeekStart, string(c.Period))
	}
	if c.Timezone == "Local" {
		return fmt.Errorf("%w: %s: Timezone %q differs from host to host, so the processes of a fleet would disagree on the periods: name a zone (\"Europe/Paris\"), or \"\" for UTC", ratelimit.ErrInvalidConfig, pkg, c.Timezone)
	}
	if _, err := location(c.Timezone); err != nil {
		return fmt.Errorf("%w: %s: Timezone %q is not a time zone of the IANA database (time.LoadLocation: %v)", ratelimit.ErrInvalidConfig, pkg, c.Timezone, err)
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Limit.
func (c Config) Capacity() int64 { return int64(c.Limit) }

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// state is the count of permits granted in the period [Start, End)
// (nanoseconds since the Unix epoch); End is 0 in the initial state.
type state struct {
	Start, End int64
	Count      int64
}

// model is the reference model of a validated Config.
type model struct {
	engine.Defaults[state] // the optional methods its Caps leave out
	limit                  int64
	cal                    *calendar
}

// newModel validates c and returns its model.
func newModel(c Config) (model, error) {
	if err := c.Validate(); err != nil {
		return model{}, err
	}
	cal, err := calendarOf(c)
	if err != nil {
		return model{}, err
	}
	return model{limit: int64(c.Limit), cal: cal}, nil
}

// Initial is an empty period.
func (m *model) Initial() state { return state{} }

// at is s at now: s while its period has not ended (a state of a later
// period than now's included: an older instant counts there), otherwise
// the empty period holding now.
func (m *model) at(s state, now int64) state {
	if now < s.End {
		return s
	}
	p := m.cal.at(now)
	return state{Start: p.start, End: p.end}
}

// Used is the number of permits s counts at now, against any limit: a
// reconfigured limiter carries it over (see Holding).
func (m *model) Used(s state, now int64) int64 { return m.at(s, now).Count }

// Holding is the state in which used permits, any number, were taken at
// now: they count in now's period. A reconfigured limiter carries its
// count over so.
func (m *model) Holding(now, used int64) state {
	s := m.at(state{}, now)
	s.Count = used
	return s
}

// Step decides a request for permits at now; permits == 0 is a status check.
// A refusal changes nothing but moving to now's period; its RetryAfter is
// the time to the period's end, when the whole Limit is available again.
func (m *model) Step(s state, now, permits int64) (state, backend.Decision) {
	cur := m.at(s, now)
	d := backend.Decision{RetryAfter: -1, ResetAfter: time.Duration(cur.End - now)}
	if cur.Count+max(permits, 1) <= m.limit {
		d.Granted = true
		cur.Count += permits
	} else {
		d.RetryAfter = time.Duration(cur.End - now)
	}
	d.Remaining = max(m.limit-cur.Count, 0) // over the limit after a charge
	if cur.Count == 0 {
		d.ResetAfter = 0
	}
	return cur, d
}

// Made is the instant a decision read at now, which left s, was made at:
// now, or the start of the state's period, where an older instant counts.
// A grant's refund takes it as at.
func (m *model) Made(s state, now int64) int64 { return max(now, s.Start) }

// Refund takes back permits granted at instant at, as if they had not been
// granted, while the period they were counted in is the state's.
func (m *model) Refund(s state, now, at, permits int64) state {
	if at >= s.Start && at < s.End {
		s.Count -= min(permits, s.Count)
	}
	return s
}

// Charge counts permits in now's period without refusing (a settlement's
// excess), over the limit if need be: requests are then refused until the
// period ends, as when it is used up. The count stops at check.MaxLimit.
func (m *model) Charge(s state, now, permits int64) state {
	s = m.at(s, now)
	s.Count = check.Charged(s.Count, permits)
	return s
}

// Available is the number of permits left in the current period (negative
// when a charge took it over its limit).
func (m *model) Available(s state, now int64) int64 { return m.limit - m.at(s, now).Count }

// InitialAt is the instant from which s, left alone, is an empty period.
func (m *model) InitialAt(s state) int64 {
	if s.Count == 0 {
		return math.MinInt64
	}
	return s.End
}

// Caps: grants can be refunded and settled, and the count carries over a
// reconfiguration.
func (m *model) Caps() engine.Caps { return engine.Refunds | engine.Holds | engine.Charges }

// nominal is the w of a period in the RateLimit-Policy header field: its
// usual length (a month's is 30 days, a year's 365), which the real one
// differs from by DST, the month's or the year's days.
var nominal = map[Period]time.Duration{Day: 24 * time.Hour, Week: 7 * 24 * time.Hour, Month: 30 * 24 * time.Hour, Year: 365 * 24 * time.Hour}

// weekStart is the Param of WeekStart, a Text of the days' names: "" for
// the zero value (Sunday) of another Period than Week, so that the JSON of
// a daily quota leaves it out.
var weekStart = algo.Param[Config]{
	Name: "week_start", Kind: algo.Text, Choices: weekdays,
	Get: func(c Config) any {
		switch {
		case c.WeekStart < time.Sunday || c.WeekStart > time.Saturday:
			return strconv.Itoa(int(c.WeekStart))
		case c.Period != Week && c.WeekStart == time.Sunday:
			return ""
		}
		return weekdays[c.WeekStart]
	},
	Set: func(c *Config, v any) {
		for i, n := range weekdays {
			if n == v.(string) {
				c.WeekStart = time.Weekday(i)
			}
		}
	},
}

func init() {
	algo.Register(&algo.Algorithm[Config, state]{
		Name: pkg,
		Model: func(c Config) (engine.Model[state], error) {
			m, err := newModel(c)
			return &m, err
		},
		// The script gets the limit, and with each call the boundaries of
		// the periods around the caller's clock (see the package doc).
		Redis: func(c Config, _ algo.RedisOptions) (algo.Redis, error) {
			if err := c.Validate(); err != nil {
				return algo.Redis{}, err
			}
			cal, err := calendarOf(c)
			if err != nil {
				return algo.Redis{}, err
			}
			return algo.Redis{Lua: []string{"quota"}, Suffixes: []string{":qt"}, Args: []any{c.Limit},
				PerCall: func(local time.Time) []any { return cal.at(local.UnixNano()).args }}, nil
		},
		Window: func(c Config) time.Duration { return nominal[c.Period] },
		Params: []algo.Param[Config]{
			algo.Int("limit", func(c *Config) *int { return &c.Limit }),
			algo.Str("period", func(c *Config) *Period { return &c.Period }, periods...),
			weekStart,
			algo.Str("timezone", func(c *Config) *string { return &c.Timezone }),
			algo.QueueOf(func(c *Config) *ratelimit.Queue { return &c.Queue }),
		},
		Describe: describe,
		// The period's end: ResetAfter, or the end of now's period when
		// nothing is counted.
		Grows: func(c Config, _ int64, reset time.Duration, now time.Time) (time.Duration, bool) {
			if reset > 0 {
				return reset, true
			}
			cal, err := calendarOf(c)
			if err != nil {
				return 0, false
			}
			n := now.UnixNano()
			return time.Duration(cal.at(n).end - n), true
		},
	})
}

// describe says c for people: "quota: 1000 per month (Europe/Paris)".
func describe(c Config) string {
	zone := c.Timezone
	if zone == "" {
		zone = "UTC"
	}
	per := string(c.Period)
	if c.Period == Week {
		per += " from " + c.WeekStart.String()
	}
	return "quota: " + strconv.Itoa(c.Limit) + " per " + per + " (" + zone + ")"
}
