package quota

import (
	"sync"
	"sync/atomic"
	"time"
)

// span is the periods around an instant, in nanoseconds since the Unix
// epoch: the previous one [prev, start), the current one [start, end) and
// the next one [end, next). args are the four in microseconds, the Redis
// script's arguments; a span does not change once made.
type span struct {
	prev, start, end, next int64
	args                   []any
}

// calendar computes a configuration's periods, and remembers the last span
// it computed: decisions within one period compute nothing.
type calendar struct {
	period    Period
	loc       *time.Location
	weekStart time.Weekday
	last      atomic.Pointer[span]
}

// calendarKey is what a calendar depends on.
type calendarKey struct {
	period    Period
	zone      string
	weekStart time.Weekday
}

// calendars holds the calendar of each valid (period, zone, first day)
// used: at most 4 x 7 per zone of the database, shared by every limiter
// of them, so that a new key's first decision (a partitioned limiter's)
// finds its period computed.
var calendars sync.Map // calendarKey -> *calendar

// calendarOf returns the calendar of c, which must be valid.
func calendarOf(c Config) (*calendar, error) {
	k := calendarKey{c.Period, c.Timezone, c.WeekStart}
	if k.period != Week {
		k.weekStart = time.Sunday
	}
	if cal, ok := calendars.Load(k); ok {
		return cal.(*calendar), nil
	}
	loc, err := location(c.Timezone)
	if err != nil {
		return nil, err
	}
	cal, _ := calendars.LoadOrStore(k, &calendar{period: k.period, loc: loc, weekStart: k.weekStart})
	return cal.(*calendar), nil
}

// locations caches the time zones loaded (only valid ones: their number
// is bounded by the database's).
var locations sync.Map // name -> *time.Location

// location is time.LoadLocation(name), read from the database once.
func location(name string) (*time.Location, error) {
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, loc)
	return loc, nil
}

// at is the span of the period holding now.
func (c *calendar) at(now int64) *span {
	if s := c.last.Load(); s != nil && now >= s.start && now < s.end {
		return s
	}
	s := c.spanAt(now)
	c.last.Store(s)
	return s
}

// spanAt computes the span of the period holding now.
func (c *calendar) spanAt(now int64) *span {
	start, end := c.periodOf(time.Unix(0, now))
	prev, _ := c.periodOf(start.Add(-time.Nanosecond))
	_, next := c.periodOf(end)
	s := &span{prev: prev.UnixNano(), start: start.UnixNano(), end: end.UnixNano(), next: next.UnixNano()}
	s.args = []any{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
	return s
}

// periodOf returns the period that holds t: from the first instant of its
// first local date to the first instant of the next period's.
func (c *calendar) periodOf(t time.Time) (start, end time.Time) {
	t = t.In(c.loc)
	y, m, d := c.first(t)
	start = dayStart(y, m, d, c.loc)
	y, m, d = c.following(y, m, d)
	end = dayStart(y, m, d, c.loc)
	// Where clocks go back across midnight, the instants after the first
	// of a date may read the date before: t then lies past the period of
	// its date. Such hours are few, and so are the steps.
	for i := 0; i < 4 && !t.Before(end); i++ {
		start = end
		y, m, d = c.following(y, m, d)
		end = dayStart(y, m, d, c.loc)
	}
	return start, end
}

// first is the first local date of the period holding t's local date.
func (c *calendar) first(t time.Time) (int, time.Month, int) {
	y, m, d := t.Date()
	switch c.period {
	case Week:
		back := (int(t.Weekday()) - int(c.weekStart) + 7) % 7
		return date(y, m, d-back)
	case Month:
		return y, m, 1
	case Year:
		return y, time.January, 1
	}
	return y, m, d
}

// following is the first date of the period after the one whose first
// date is y-m-d.
func (c *calendar) following(y int, m time.Month, d int) (int, time.Month, int) {
	switch c.period {
	case Week:
		return date(y, m, d+7)
	case Month:
		return date(y, m+1, 1)
	case Year:
		return y + 1, time.January, 1
	}
	return date(y, m, d+1)
}

// date normalizes a civil date (a day 0 is the last of the month before).
func date(y int, m time.Month, d int) (int, time.Month, int) {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Date()
}

// maxOffset exceeds every UTC offset a zone has had (local mean times
// reached about ±16h): no instant of a date comes before its midnight in
// UTC less maxOffset.
const maxOffset = 36 * time.Hour

// dayStart is the first instant whose local date in loc is y-m-d or
// later: the date's midnight where it exists. Not time.Date(y, m, d, 0,
// 0, 0, 0, loc), which, where the clocks skip midnight (DST starting at
// 00:00, as in Havana or Santiago), returns an instant of the day before
// or of the gap. It walks the zone's offsets from maxOffset before the
// date's UTC midnight: within one offset the local time is the instant
// plus the offset, so the first instant of the date there is that
// midnight less the offset, when the offset still holds then. Dates
// differ by less than 3 days over the walk, which crosses a few offsets;
// the walk is bounded anyway.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	midnight := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	c := midnight.Add(-maxOffset)
	for i := 0; i < 64; i++ {
		t := c.In(loc)
		_, off := t.Zone()
		_, next := t.ZoneBounds()
		if !next.IsZero() && !next.After(c) {
			next = nextOffset(c, loc, off)
		}
		x := midnight.Add(-time.Duration(off) * time.Second)
		if x.Before(c) {
			x = c
		}
		if next.IsZero() || x.Before(next) {
			return x.In(loc)
		}
		c = next
	}
	return c.In(loc)
}

// nextOffset is the first whole second after c, within 2*maxOffset, at
// which loc's offset is no longer off (c's), or the zero Time: what
// ZoneBounds says, found from the offsets themselves. Go's ZoneBounds
// can answer an end that is not after the instant asked about, at the
// end of a leap year whose changes come from a zone's recurring rule (as
// they do from 2008 on in the zoneinfo.zip of Go's time/tzdata), where
// the offsets (Zone) are right.
func nextOffset(c time.Time, loc *time.Location, off int) time.Time {
	lo, hi := c.Unix(), c.Add(2*maxOffset).Unix()
	if _, o := time.Unix(hi, 0).In(loc).Zone(); o == off {
		return time.Time{}
	}
	for hi-lo > 1 { // about 18 steps
		mid := lo + (hi-lo)/2
		if _, o := time.Unix(mid, 0).In(loc).Zone(); o == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0)
}
