package quota_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/quota"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A backend makes quota limiters on a fake clock.
type backend struct {
	name string
	tick time.Duration // its clock's resolution
	f    conformance.Factory
}

var keySeq atomic.Int64

func memoryFactory(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
	l, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatalf("memory.New(%#v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// redisFactory makes limiters on client, each under a fresh key, with the
// scripts' time pinned to the clock.
func redisFactory(client goredis.UniversalClient, opts ...redis.Option) conformance.Factory {
	return func(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
		o := append(opts[:len(opts):len(opts)], redis.WithClock(clock))
		l, err := redis.New(client, fmt.Sprintf("quota-%d", keySeq.Add(1)), cfg, o...)
		if err != nil {
			t.Fatalf("redis.New(%#v): %v", cfg, err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
}

func miniClient(t testing.TB) (*miniredis.Miniredis, *goredis.Client) {
	m := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return m, c
}

func realClient(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Standalone(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// backends are memory, miniredis and a real server (skipped, or failed
// under RATELIMIT_REQUIRE_REDIS=1, without redis-server).
func backends(t *testing.T) []backend {
	_, mc := miniClient(t)
	return []backend{
		{"memory", time.Nanosecond, memoryFactory},
		{"miniredis", time.Microsecond, redisFactory(mc)},
		{"redis", time.Microsecond, func(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
			return redisFactory(realClient(t))(t, cfg, clock)
		}},
	}
}

func at(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// call is a request at an instant and what it gets: granted with rem left,
// or refused; end is the period's end as the zone's clocks write it, from
// which the step's RetryAfter (a refusal's) and ResetAfter (when the
// period counts permits) follow.
type call struct {
	at      string
	permits int
	granted bool
	rem     int64
	end     string
}

// The sequences' clocks start at ratelimittest.Start (2033-05-18), before
// all their dates: dates to come, since a Redis server expires keys on
// its own clock (the states' expiry is an instant of the pinned one).
var seqStart = ratelimittest.Start

// sequence turns calls, in time order, into a conformance.Sequence.
func sequence(t testing.TB, name string, cfg quota.Config, calls ...call) conformance.Sequence {
	seq := conformance.Sequence{Name: name, Config: cfg}
	prev := seqStart
	for _, c := range calls {
		now, end := at(t, c.at), at(t, c.end)
		st := conformance.Step{Advance: now.Sub(prev), Permits: c.permits, Granted: c.granted, Remaining: c.rem}
		if !c.granted {
			st.RetryAfter = end.Sub(now)
		}
		if !c.granted || c.rem < int64(cfg.Limit) { // the period counts permits
			st.ResetAfter = end.Sub(now)
		}
		seq.Steps = append(seq.Steps, st)
		prev = now
	}
	return seq
}

// sequences are the exact scenarios every backend must decide alike:
// local midnight, DST starts and ends (an hour, and Lord Howe's half
// hour), days whose midnight the clocks skip, months of 28 to 31 days, a
// year's end, weeks from Monday and from Sunday.
func sequences(t testing.TB) []conformance.Sequence {
	day := func(zone string) quota.Config { return quota.Config{Limit: 2, Period: quota.Day, Timezone: zone} }
	return []conformance.Sequence{
		sequence(t, "midnight-utc", day(""),
			call{"2033-06-15T23:59:58Z", 2, true, 0, "2033-06-16T00:00:00Z"},
			call{"2033-06-15T23:59:59.999999Z", 1, false, 0, "2033-06-16T00:00:00Z"},
			call{"2033-06-16T00:00:00Z", 2, true, 0, "2033-06-17T00:00:00Z"},
			call{"2033-06-16T12:00:00Z", 0, false, 0, "2033-06-17T00:00:00Z"},
		),
		sequence(t, "paris-dst-end-25h-start-23h", day("Europe/Paris"),
			call{"2033-10-30T00:00:00+02:00", 2, true, 0, "2033-10-31T00:00:00+01:00"},
			call{"2033-10-30T02:30:00+02:00", 1, false, 0, "2033-10-31T00:00:00+01:00"},
			call{"2033-10-30T02:30:00+01:00", 1, false, 0, "2033-10-31T00:00:00+01:00"},
			call{"2033-10-31T00:00:00+01:00", 1, true, 1, "2033-11-01T00:00:00+01:00"},
			call{"2034-03-25T23:59:59+01:00", 1, true, 1, "2034-03-26T00:00:00+01:00"},
			call{"2034-03-26T00:00:00+01:00", 2, true, 0, "2034-03-27T00:00:00+02:00"},
			call{"2034-03-26T03:00:00+02:00", 1, false, 0, "2034-03-27T00:00:00+02:00"},
			call{"2034-03-26T23:59:59.999999+02:00", 1, false, 0, "2034-03-27T00:00:00+02:00"},
			call{"2034-03-27T00:00:00+02:00", 2, true, 0, "2034-03-28T00:00:00+02:00"},
		),
		sequence(t, "new-york-dst", day("America/New_York"),
			call{"2033-11-06T01:30:00-04:00", 2, true, 0, "2033-11-07T00:00:00-05:00"},
			call{"2033-11-06T01:30:00-05:00", 1, false, 0, "2033-11-07T00:00:00-05:00"},
			call{"2033-11-07T00:00:00-05:00", 2, true, 0, "2033-11-08T00:00:00-05:00"},
			call{"2034-03-12T00:00:00-05:00", 2, true, 0, "2034-03-13T00:00:00-04:00"},
			call{"2034-03-12T03:00:00-04:00", 1, false, 0, "2034-03-13T00:00:00-04:00"},
		),
		sequence(t, "lord-howe-half-hour", day("Australia/Lord_Howe"),
			call{"2033-10-02T00:00:00+10:30", 2, true, 0, "2033-10-03T00:00:00+11:00"},
			call{"2033-10-02T12:00:00+11:00", 1, false, 0, "2033-10-03T00:00:00+11:00"},
			call{"2034-04-02T00:00:00+11:00", 2, true, 0, "2034-04-03T00:00:00+10:30"},
			call{"2034-04-02T23:59:59+10:30", 1, false, 0, "2034-04-03T00:00:00+10:30"},
			call{"2034-04-03T00:00:00+10:30", 1, true, 1, "2034-04-04T00:00:00+10:30"},
		),
		// Havana's clocks skip midnight on March 12th, 2034: the 11th
		// lasts until 01:00, when the 12th starts (time.Date would start
		// it an hour early, at 23:00 on the 11th).
		sequence(t, "havana-midnight-dst", day("America/Havana"),
			call{"2033-11-06T00:30:00-04:00", 2, true, 0, "2033-11-07T00:00:00-05:00"},
			call{"2033-11-06T00:30:00-05:00", 1, false, 0, "2033-11-07T00:00:00-05:00"},
			call{"2034-03-11T22:00:00-05:00", 2, true, 0, "2034-03-12T01:00:00-04:00"},
			call{"2034-03-11T23:30:00-05:00", 1, false, 0, "2034-03-12T01:00:00-04:00"},
			call{"2034-03-12T01:00:00-04:00", 2, true, 0, "2034-03-13T00:00:00-04:00"},
			call{"2034-03-12T23:00:00-04:00", 1, false, 0, "2034-03-13T00:00:00-04:00"},
		),
		// Santiago: Sunday September 4th, 2033 starts at 01:00, Saturday
		// April 1st, 2034 lasts 25 hours.
		sequence(t, "santiago-midnight-dst", day("America/Santiago"),
			call{"2033-09-03T23:59:59-04:00", 2, true, 0, "2033-09-04T01:00:00-03:00"},
			call{"2033-09-04T01:00:00-03:00", 1, true, 1, "2033-09-05T00:00:00-03:00"},
			call{"2034-04-01T00:00:00-03:00", 2, true, 0, "2034-04-02T00:00:00-04:00"},
			call{"2034-04-01T23:30:00-04:00", 1, false, 0, "2034-04-02T00:00:00-04:00"},
		),
		sequence(t, "month-ends", quota.Config{Limit: 3, Period: quota.Month, Timezone: "UTC"},
			call{"2034-01-31T23:59:59Z", 3, true, 0, "2034-02-01T00:00:00Z"},
			call{"2034-02-01T00:00:00Z", 3, true, 0, "2034-03-01T00:00:00Z"},
			call{"2034-02-28T00:00:00Z", 1, false, 0, "2034-03-01T00:00:00Z"},
			call{"2034-04-01T00:00:00Z", 3, true, 0, "2034-05-01T00:00:00Z"},
			call{"2034-04-30T23:59:59Z", 1, false, 0, "2034-05-01T00:00:00Z"},
			call{"2036-02-01T00:00:00Z", 3, true, 0, "2036-03-01T00:00:00Z"},
			call{"2036-02-29T23:59:59Z", 1, false, 0, "2036-03-01T00:00:00Z"},
		),
		sequence(t, "month-paris", quota.Config{Limit: 1, Period: quota.Month, Timezone: "Europe/Paris"},
			call{"2034-03-01T00:00:00+01:00", 1, true, 0, "2034-04-01T00:00:00+02:00"},
			call{"2034-03-31T23:59:59+02:00", 1, false, 0, "2034-04-01T00:00:00+02:00"},
			call{"2034-03-31T22:00:00Z", 1, true, 0, "2034-05-01T00:00:00+02:00"},
		),
		sequence(t, "year-end-tokyo", quota.Config{Limit: 2, Period: quota.Year, Timezone: "Asia/Tokyo"},
			call{"2033-12-31T14:59:59Z", 2, true, 0, "2034-01-01T00:00:00+09:00"},
			call{"2033-12-31T23:59:59.999999+09:00", 1, false, 0, "2034-01-01T00:00:00+09:00"},
			call{"2034-01-01T00:00:00+09:00", 1, true, 1, "2035-01-01T00:00:00+09:00"},
			call{"2034-12-31T23:00:00+09:00", 1, true, 0, "2035-01-01T00:00:00+09:00"},
		),
		sequence(t, "week-monday-paris", quota.Config{Limit: 2, Period: quota.Week, WeekStart: time.Monday, Timezone: "Europe/Paris"},
			call{"2034-03-22T12:00:00+01:00", 2, true, 0, "2034-03-27T00:00:00+02:00"},
			call{"2034-03-26T23:00:00+02:00", 1, false, 0, "2034-03-27T00:00:00+02:00"},
			call{"2034-03-27T00:00:00+02:00", 2, true, 0, "2034-04-03T00:00:00+02:00"},
		),
		sequence(t, "week-sunday-new-york", quota.Config{Limit: 2, Period: quota.Week, WeekStart: time.Sunday, Timezone: "America/New_York"},
			call{"2034-03-08T12:00:00-05:00", 2, true, 0, "2034-03-12T00:00:00-05:00"},
			call{"2034-03-11T23:59:59-05:00", 1, false, 0, "2034-03-12T00:00:00-05:00"},
			call{"2034-03-12T00:00:00-05:00", 1, true, 1, "2034-03-19T00:00:00-04:00"},
			call{"2034-03-18T23:59:59-04:00", 1, true, 0, "2034-03-19T00:00:00-04:00"},
			call{"2034-03-19T00:00:00-04:00", 2, true, 0, "2034-03-26T00:00:00-04:00"},
		),
	}
}

// TestSequences: the exact scenarios on memory, miniredis and a real
// server, through the backends' shared harness.
func TestSequences(t *testing.T) {
	seqs := sequences(t)
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			conformance.RunSequences(t, b.f, seqs, conformance.Tick(b.tick))
		})
	}
}

// TestLimitIsCapacity: a quota's lease reports its Limit, and a request
// over it is refused with ErrExceedsLimit, changing nothing.
func TestLimitIsCapacity(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			l := b.f(t, quota.Config{Limit: 4, Period: quota.Month}, clock)
			if _, err := l.Acquire(context.Background(), 5); err == nil || !errors.Is(err, ratelimit.ErrExceedsLimit) {
				t.Fatalf("Acquire(5): %v, want ErrExceedsLimit", err)
			}
			lease, err := l.Acquire(context.Background(), 4)
			if err != nil || !lease.Acquired() || lease.Limit() != 4 || lease.Remaining() != 0 {
				t.Fatalf("Acquire(4): %v, %v", lease, err)
			}
		})
	}
}
