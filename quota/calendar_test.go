package quota

import (
	"archive/zip"
	"io"
	"math/rand"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func mustLoad(t testing.TB, zone string) *time.Location {
	t.Helper()
	loc, err := location(zone)
	if err != nil {
		t.Fatalf("location(%q): %v", zone, err)
	}
	return loc
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPeriods: the period holding an instant, in local dates of its zone,
// with its real length: days of 23, 25, 23.5 and 24.5 hours, days whose
// midnight the clocks skip, months of 28 to 31 days, a year's end, and
// weeks from Monday and from Sunday. The bounds are written with their
// offsets, as the zone's clocks read them.
func TestPeriods(t *testing.T) {
	for _, c := range []struct {
		zone       string
		period     Period
		weekStart  time.Weekday
		at         string
		start, end string
		length     time.Duration
	}{
		{"", Day, 0, "2025-01-15T12:00:00Z", "2025-01-15T00:00:00Z", "2025-01-16T00:00:00Z", 24 * time.Hour},
		{"UTC", Day, 0, "2025-01-15T23:59:59.999999999Z", "2025-01-15T00:00:00Z", "2025-01-16T00:00:00Z", 24 * time.Hour},
		{"Europe/Paris", Day, 0, "2025-03-30T12:00:00+02:00", "2025-03-30T00:00:00+01:00", "2025-03-31T00:00:00+02:00", 23 * time.Hour},
		{"Europe/Paris", Day, 0, "2025-10-26T02:30:00+01:00", "2025-10-26T00:00:00+02:00", "2025-10-27T00:00:00+01:00", 25 * time.Hour},
		{"Europe/Paris", Day, 0, "2025-03-29T23:59:59+01:00", "2025-03-29T00:00:00+01:00", "2025-03-30T00:00:00+01:00", 24 * time.Hour},
		{"America/New_York", Day, 0, "2025-03-09T03:00:00-04:00", "2025-03-09T00:00:00-05:00", "2025-03-10T00:00:00-04:00", 23 * time.Hour},
		{"America/New_York", Day, 0, "2025-11-02T01:30:00-05:00", "2025-11-02T00:00:00-04:00", "2025-11-03T00:00:00-05:00", 25 * time.Hour},
		{"Australia/Lord_Howe", Day, 0, "2025-04-06T01:45:00+10:30", "2025-04-06T00:00:00+11:00", "2025-04-07T00:00:00+10:30", 24*time.Hour + 30*time.Minute},
		{"Australia/Lord_Howe", Day, 0, "2025-10-05T12:00:00+11:00", "2025-10-05T00:00:00+10:30", "2025-10-06T00:00:00+11:00", 23*time.Hour + 30*time.Minute},
		// Havana's DST starts at midnight: March 9th starts at 01:00, and
		// March 8th lasts until then.
		{"America/Havana", Day, 0, "2025-03-09T04:59:59Z", "2025-03-08T00:00:00-05:00", "2025-03-09T01:00:00-04:00", 24 * time.Hour},
		{"America/Havana", Day, 0, "2025-03-09T01:00:00-04:00", "2025-03-09T01:00:00-04:00", "2025-03-10T00:00:00-04:00", 23 * time.Hour},
		{"America/Havana", Day, 0, "2025-11-02T00:30:00-05:00", "2025-11-02T00:00:00-04:00", "2025-11-03T00:00:00-05:00", 25 * time.Hour},
		// Santiago's DST starts at 24:00 (Sunday starts at 01:00) and ends
		// at 24:00 (Saturday lasts 25 hours).
		{"America/Santiago", Day, 0, "2025-09-07T01:00:00-03:00", "2025-09-07T01:00:00-03:00", "2025-09-08T00:00:00-03:00", 23 * time.Hour},
		{"America/Santiago", Day, 0, "2025-04-05T23:30:00-04:00", "2025-04-05T00:00:00-03:00", "2025-04-06T00:00:00-04:00", 25 * time.Hour},
		// Samoa skipped December 30th, 2011: the 29th ends when the 31st starts.
		{"Pacific/Apia", Day, 0, "2011-12-29T12:00:00-10:00", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", 24 * time.Hour},
		{"UTC", Month, 0, "2025-02-14T00:00:00Z", "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z", 28 * 24 * time.Hour},
		{"UTC", Month, 0, "2024-02-29T23:59:59Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", 29 * 24 * time.Hour},
		{"UTC", Month, 0, "2025-04-30T23:00:00Z", "2025-04-01T00:00:00Z", "2025-05-01T00:00:00Z", 30 * 24 * time.Hour},
		{"UTC", Month, 0, "2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z", 31 * 24 * time.Hour},
		{"Europe/Paris", Month, 0, "2025-03-31T23:59:00+02:00", "2025-03-01T00:00:00+01:00", "2025-04-01T00:00:00+02:00", 31*24*time.Hour - time.Hour},
		{"Europe/Paris", Month, 0, "2025-03-31T22:00:00Z", "2025-04-01T00:00:00+02:00", "2025-05-01T00:00:00+02:00", 30 * 24 * time.Hour},
		{"UTC", Year, 0, "2024-12-31T23:59:59.999Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z", 366 * 24 * time.Hour},
		{"Asia/Tokyo", Year, 0, "2024-12-31T15:00:00Z", "2025-01-01T00:00:00+09:00", "2026-01-01T00:00:00+09:00", 365 * 24 * time.Hour},
		{"UTC", Week, time.Monday, "2025-03-05T10:00:00Z", "2025-03-03T00:00:00Z", "2025-03-10T00:00:00Z", 7 * 24 * time.Hour},
		{"UTC", Week, time.Sunday, "2025-03-05T10:00:00Z", "2025-03-02T00:00:00Z", "2025-03-09T00:00:00Z", 7 * 24 * time.Hour},
		{"UTC", Week, time.Monday, "2024-12-31T10:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z", 7 * 24 * time.Hour},
		{"Europe/Paris", Week, time.Monday, "2025-03-30T23:00:00+02:00", "2025-03-24T00:00:00+01:00", "2025-03-31T00:00:00+02:00", 7*24*time.Hour - time.Hour},
		{"America/New_York", Week, time.Sunday, "2025-03-09T00:00:00-05:00", "2025-03-09T00:00:00-05:00", "2025-03-16T00:00:00-04:00", 7*24*time.Hour - time.Hour},
		{"America/New_York", Week, time.Sunday, "2025-03-08T23:59:59-05:00", "2025-03-02T00:00:00-05:00", "2025-03-09T00:00:00-05:00", 7 * 24 * time.Hour},
		{"America/New_York", Week, time.Saturday, "2025-03-08T23:59:59-05:00", "2025-03-08T00:00:00-05:00", "2025-03-15T00:00:00-04:00", 7*24*time.Hour - time.Hour},
	} {
		cal, err := calendarOf(Config{Limit: 1, Period: c.period, WeekStart: c.weekStart, Timezone: c.zone})
		if err != nil {
			t.Fatal(err)
		}
		at := mustTime(t, c.at)
		start, end := cal.periodOf(at)
		wantStart, wantEnd := mustTime(t, c.start), mustTime(t, c.end)
		if !start.Equal(wantStart) || !end.Equal(wantEnd) || end.Sub(start) != c.length {
			t.Errorf("%s %s from %v, at %s: [%v, %v) %v, want [%v, %v) %v", c.zone, c.period, c.weekStart, c.at,
				start, end, end.Sub(start), wantStart.In(cal.loc), wantEnd.In(cal.loc), c.length)
		}
		s := cal.at(at.UnixNano())
		if s.start != wantStart.UnixNano() || s.end != wantEnd.UnixNano() {
			t.Errorf("%s %s at %s: span [%d, %d), want [%v, %v)", c.zone, c.period, c.at, s.start, s.end, wantStart, wantEnd)
		}
	}
}

// TestSkippedMidnight: where the clocks skip midnight, the day starts when
// they reach it; time.Date returns an instant of the day before in Havana
// and Santiago (the gap's other side), which a period must not start at.
func TestSkippedMidnight(t *testing.T) {
	for _, c := range []struct {
		zone   string
		y      int
		m      time.Month
		d      int
		wanted string
		trap   bool // time.Date is wrong there
	}{
		{"America/Havana", 2025, time.March, 9, "2025-03-09T01:00:00-04:00", true},
		{"America/Santiago", 2025, time.September, 7, "2025-09-07T01:00:00-03:00", true},
		{"Asia/Beirut", 2025, time.March, 30, "2025-03-30T01:00:00+03:00", false},
	} {
		loc := mustLoad(t, c.zone)
		got := dayStart(c.y, c.m, c.d, loc)
		if want := mustTime(t, c.wanted); !got.Equal(want) {
			t.Errorf("%s %d-%02d-%02d starts at %v, want %v", c.zone, c.y, c.m, c.d, got, want)
		}
		if naive := time.Date(c.y, c.m, c.d, 0, 0, 0, 0, loc); c.trap && (naive.Equal(got) || naive.Day() == c.d) {
			t.Errorf("%s: time.Date gives %v, which should be of the day before or the gap: the test no longer shows the trap", c.zone, naive)
		}
	}
}

// scanStart is the oracle of dayStart: the first second whose local date
// is y-m-d or later, found by walking the clock forward in steps of 15
// minutes, then minutes, then seconds (every offset change these zones
// have made since 1970 falls on a whole second).
func scanStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	target := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	reached := func(t time.Time) bool {
		ly, lm, ld := t.In(loc).Date()
		return !time.Date(ly, lm, ld, 0, 0, 0, 0, time.UTC).Before(target)
	}
	t := target.Add(-16 * time.Hour)
	for _, step := range []time.Duration{15 * time.Minute, time.Minute, time.Second} {
		for !reached(t) {
			t = t.Add(step)
		}
		t = t.Add(-step)
	}
	return t.Add(time.Second)
}

// TestDayStartAgainstScan: dayStart equals the oracle at every date on
// either side of each offset change from 2011 to 2026 in zones of every
// kind of change (an hour, 30 minutes, at midnight, at 24:00, a date
// skipped), and at random dates.
func TestDayStartAgainstScan(t *testing.T) {
	rng := rand.New(rand.NewSource(37))
	from, to := time.Date(2011, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)
	for _, zone := range []string{"UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Havana",
		"America/Santiago", "Asia/Beirut", "Pacific/Apia", "Asia/Kathmandu", "Pacific/Chatham"} {
		loc := mustLoad(t, zone)
		var dates []time.Time
		for c := from.In(loc); c.Before(to); {
			_, next := c.ZoneBounds()
			if next.IsZero() || !next.Before(to) {
				break
			}
			for _, dd := range []int{-1, 0, 1} {
				ny, nm, nd := next.In(loc).AddDate(0, 0, dd).Date()
				dates = append(dates, time.Date(ny, nm, nd, 0, 0, 0, 0, time.UTC))
			}
			c = next
		}
		for i := 0; i < 20; i++ {
			dates = append(dates, from.AddDate(0, 0, rng.Intn(int(to.Sub(from).Hours()/24))))
		}
		for _, dt := range dates {
			y, m, d := dt.Date()
			if got, want := dayStart(y, m, d, loc), scanStart(y, m, d, loc); !got.Equal(want) {
				t.Errorf("%s %d-%02d-%02d: dayStart %v, scan %v", zone, y, m, d, got, want)
			}
		}
	}
}

// TestSpansAreContiguous: around random instants, the previous, current
// and next periods follow one another, hold the instant in the middle
// one, and each starts at its first date's first instant.
func TestSpansAreContiguous(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	from := time.Date(2011, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	span := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() - from
	for _, zone := range []string{"Europe/Paris", "America/Santiago", "Australia/Lord_Howe", "America/Havana"} {
		for _, p := range []Period{Day, Week, Month, Year} {
			for ws := time.Sunday; ws <= time.Saturday; ws++ {
				if p != Week && ws != time.Sunday {
					continue
				}
				cal, err := calendarOf(Config{Limit: 1, Period: p, WeekStart: ws, Timezone: zone})
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 30; i++ {
					now := from + rng.Int63n(span)
					s := cal.spanAt(now)
					if !(s.prev < s.start && s.start <= now && now < s.end && s.end < s.next) {
						t.Fatalf("%s %s: span %+v around %v", zone, p, s, time.Unix(0, now).In(cal.loc))
					}
					for _, b := range []int64{s.prev, s.start, s.end, s.next} {
						bt := time.Unix(0, b).In(cal.loc)
						y, m, d := bt.Date()
						if !bt.Equal(dayStart(y, m, d, cal.loc)) {
							t.Fatalf("%s %s: bound %v is not its date's first instant", zone, p, bt)
						}
						if p == Week && bt.Weekday() != ws {
							t.Fatalf("%s week from %v: bound %v", zone, ws, bt)
						}
						if (p == Month || p == Year) && d != 1 || p == Year && m != time.January {
							t.Fatalf("%s %s: bound %v", zone, p, bt)
						}
					}
					if b := s.args; b[0] != s.prev/1000 || b[1] != s.start/1000 || b[2] != s.end/1000 || b[3] != s.next/1000 {
						t.Fatalf("args %v of span %+v", b, s)
					}
				}
			}
		}
	}
}

// TestDayStartWithGosZoneDatabase: with the zone database Go ships
// ($GOROOT/lib/time/zoneinfo.zip, what time/tzdata embeds), whose changes
// after 2007 come from each zone's recurring rule, ZoneBounds answers an
// end that is not after the instant at the end of a leap year; the dates
// around each year's end still start at their first instant.
func TestDayStartWithGosZoneDatabase(t *testing.T) {
	z, err := zip.OpenReader(filepath.Join(runtime.GOROOT(), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatalf("Go's zone database: %v", err)
	}
	defer z.Close()
	for _, zone := range []string{"America/New_York", "Europe/Paris", "America/Havana", "Australia/Lord_Howe", "America/Santiago"} {
		f, err := z.Open(zone)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		loc, err := time.LoadLocationFromTZData(zone, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, y := range []int{2023, 2024, 2028, 2040} {
			for d := 27; d <= 31+4; d++ { // Dec 27 to Jan 4
				yy, mm, dd := date(y, time.December, d)
				if got, want := dayStart(yy, mm, dd, loc), scanStart(yy, mm, dd, loc); !got.Equal(want) {
					t.Errorf("%s %d-%02d-%02d: dayStart %v, scan %v", zone, yy, mm, dd, got, want)
				}
			}
		}
	}
}
