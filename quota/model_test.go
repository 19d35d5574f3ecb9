package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/modeltest"
)

// Tests of the reference model: step tables at instants written in their
// zone's words, then properties over random sequences whose instants go
// back by up to a day (the memory backend reads its clock before its
// lock), and Refund.

type step = modeltest.Step

func mustModel(t *testing.T, c Config) *model { t.Helper(); return modeltest.New(t, newModel, c) }

// ns is the instant s (RFC 3339) in nanoseconds.
func ns(t testing.TB, s string) int64 { t.Helper(); return mustTime(t, s).UnixNano() }

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // in the error; "" for a valid config
	}{
		{Config{Limit: 1, Period: Day}, ""},
		{Config{Limit: 1 << 53, Period: Year, Timezone: "Pacific/Chatham"}, ""},
		{Config{Limit: 5, Period: Week, WeekStart: time.Monday, Timezone: "Europe/Paris"}, ""},
		{Config{Limit: 5, Period: Week, WeekStart: time.Saturday, Timezone: "UTC"}, ""},
		{Config{Limit: 0, Period: Day}, "Limit"},
		{Config{Limit: 1<<53 + 1, Period: Day}, "Limit"},
		{Config{Limit: 1}, "Period is required"},
		{Config{Limit: 1, Period: "fortnight"}, `Period "fortnight" must be one of day, week, month, year`},
		{Config{Limit: 1, Period: "Day"}, `Period "Day"`},
		{Config{Limit: 1, Period: Week, WeekStart: 7}, "WeekStart 7 is not a day of the week"},
		{Config{Limit: 1, Period: Week, WeekStart: -1}, "WeekStart -1"},
		{Config{Limit: 1, Period: Month, WeekStart: time.Monday}, `WeekStart Monday applies to weekly periods only, and Period is "month"`},
		{Config{Limit: 1, Period: Day, Timezone: "Local"}, `Timezone "Local" differs from host to host`},
		{Config{Limit: 1, Period: Day, Timezone: "Europe/Pariss"}, `Timezone "Europe/Pariss" is not a time zone`},
		{Config{Limit: 1, Period: Day, Timezone: "../etc/passwd"}, `Timezone "../etc/passwd"`},
		{Config{Limit: 1, Period: Day, Timezone: "/usr/share/zoneinfo/UTC"}, `Timezone "/usr/share/zoneinfo/UTC"`},
		{Config{Limit: 1, Period: Day, Queue: ratelimit.Queue{Limit: -1}}, "Queue.Limit"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ratelimit.ErrInvalidConfig)):
			t.Errorf("%+v: %v, want an ErrInvalidConfig saying %q", c.cfg, err, c.want)
		}
		if _, merr := newModel(c.cfg); (merr == nil) != (err == nil) {
			t.Errorf("%+v: newModel %v, Validate %v", c.cfg, merr, err)
		}
	}
}

// TestStepAcrossParisDST: a daily quota of 3 in Paris on the day its
// clocks skip an hour (23 hours long) and the day after.
func TestStepAcrossParisDST(t *testing.T) {
	m := mustModel(t, Config{Limit: 3, Period: Day, Timezone: "Europe/Paris"})
	t0 := ns(t, "2025-03-29T23:59:59+01:00")
	at := func(s string) int64 { return ns(t, s) }
	modeltest.Run(t, m.Step, t0, m.Initial(), []step{
		{at("2025-03-29T23:59:59+01:00"), 2, true, 1, 0},
		{at("2025-03-29T23:59:59.5+01:00"), 2, false, 1, 500 * time.Millisecond},
		{at("2025-03-30T00:00:00+01:00"), 3, true, 0, 0},
		{at("2025-03-30T03:00:00+02:00"), 0, false, 0, 21 * time.Hour},
		{at("2025-03-30T23:59:59.999999999+02:00"), 1, false, 0, 1},
		{at("2025-03-31T00:00:00+02:00"), 3, true, 0, 0},
		{at("2025-03-31T00:00:00+02:00"), 1, false, 0, 24 * time.Hour},
	})
}

// TestOlderInstantCountsInStatePeriod: a decision at an instant of a period
// older than the state's counts in the state's period.
func TestOlderInstantCountsInStatePeriod(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Period: Day})
	day := int64(24 * time.Hour)
	t0 := ns(t, "2025-06-02T00:00:00Z")
	modeltest.Run(t, m.Step, t0, m.Initial(), []step{
		{t0, 1, true, 1, 0},
		{t0 - 1, 1, true, 0, 0}, // yesterday's instant: counted today
		{t0 - 1, 1, false, 0, time.Duration(day + 1)},
		{t0 + day - 1, 1, false, 0, 1},
		{t0 + day, 2, true, 0, 0},
	})
}

func simOf(m *model) modeltest.Sim[state] {
	return modeltest.Sim[state]{
		Capacity:  m.limit,
		Initial:   m.Initial,
		Step:      m.Step,
		InitialAt: m.InitialAt,
		GrantEnd:  func(at int64) int64 { return m.cal.at(at).end },
		Far:       check.Far,
		Refund:    m.Refund,
		Made:      m.Made,
	}
}

// checkBound checks that the grants in each period add up to at most
// Limit.
func checkBound(t *testing.T, m *model, gs []modeltest.Grant, cs []modeltest.Call) {
	t.Helper()
	var start, sum int64
	first := 0
	for i, g := range gs {
		if p := m.cal.spanAt(g.At).start; i == 0 || p != start {
			start, sum, first = p, 0, i
		}
		if sum += g.N; sum > m.limit {
			t.Fatalf("%d permits granted in the period from %v (steps %d..%d), Limit %d\ncalls: %v",
				sum, time.Unix(0, start).In(m.cal.loc), gs[first].Step, g.Step, m.limit, cs[max(0, gs[first].Step-5):g.Step+1])
		}
	}
}

// The random sequences move by up to gap, so that they cross many
// periods, DST changes and month ends over 3000 calls.
var randomConfigs = []modeltest.Random[Config]{
	{Config{Limit: 3, Period: Day, Timezone: "Europe/Paris"}, 3 * time.Hour},
	{Config{Limit: 1, Period: Day, Timezone: "Australia/Lord_Howe"}, 5 * time.Hour},
	{Config{Limit: 7, Period: Day, Timezone: "America/Santiago"}, 2 * time.Hour},
	{Config{Limit: 5, Period: Week, WeekStart: time.Monday, Timezone: "America/New_York"}, 20 * time.Hour},
	{Config{Limit: 4, Period: Month, Timezone: "America/Havana"}, 3 * 24 * time.Hour},
	{Config{Limit: 2, Period: Year}, 40 * 24 * time.Hour},
}

// TestOutOfOrder runs a few thousand requests per configuration whose
// instants go back by up to a day and forward again, and checks the bound
// in every period, RetryAfter and InitialAt.
func TestOutOfOrder(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckOutOfOrder(t, simOf(m), gap, int64(24*time.Hour), func(gs []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, gs, cs) })
	})
}

// TestRefundSameInstant: a grant refunded at once, given the instant it
// was made at, leaves the model deciding as if it had not been made.
func TestRefundSameInstant(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckRefundSameInstant(t, simOf(m), gap, int64(24*time.Hour))
	})
}

// TestRefundNeverExceedsBound: random requests and refunds of recent
// grants keep the grants not refunded within Limit per period.
func TestRefundNeverExceedsBound(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckRefundsKeepBound(t, simOf(m), gap, int64(24*time.Hour), false, func(kept []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, kept, cs) })
	})
}

// TestRefundAfterPeriodEnded: a refund of a grant whose period has ended
// gives nothing back.
func TestRefundAfterPeriodEnded(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Period: Month, Timezone: "Europe/Paris"})
	jan, feb := ns(t, "2025-01-31T23:00:00+01:00"), ns(t, "2025-02-01T00:00:00+01:00")
	s := modeltest.Run(t, m.Step, jan, m.Initial(), []step{{jan, 2, true, 0, 0}})
	made := m.Made(s, jan)
	s = modeltest.Run(t, m.Step, jan, s, []step{{feb, 2, true, 0, 0}})
	s = m.Refund(s, feb, made, 2)
	modeltest.Run(t, m.Step, jan, s, []step{{feb, 1, false, 0, 28 * 24 * time.Hour}})
}

// TestHolding: a reconfigured limiter's count carries over into the new
// configuration's period holding the change, whatever its length.
func TestHolding(t *testing.T) {
	day := mustModel(t, Config{Limit: 5, Period: Day, Timezone: "America/New_York"})
	month := mustModel(t, Config{Limit: 5, Period: Month, Timezone: "America/New_York"})
	t0 := ns(t, "2025-11-02T12:00:00-05:00")
	s, _ := day.Step(day.Initial(), t0, 3)
	if u := day.Used(s, t0); u != 3 {
		t.Fatalf("Used = %d, want 3", u)
	}
	if u := day.Used(s, ns(t, "2025-11-03T00:00:00-05:00")); u != 0 {
		t.Fatalf("Used the next day = %d, want 0", u)
	}
	h := month.Holding(t0, day.Used(s, t0))
	if want := (state{ns(t, "2025-11-01T00:00:00-04:00"), ns(t, "2025-12-01T00:00:00-05:00"), 3}); h != want {
		t.Fatalf("Holding = %+v, want %+v", h, want)
	}
	if a := month.Available(h, ns(t, "2025-11-30T23:59:59-05:00")); a != 2 {
		t.Fatalf("Available at the month's end = %d, want 2", a)
	}
	if at := month.InitialAt(h); at != ns(t, "2025-12-01T00:00:00-05:00") {
		t.Fatalf("InitialAt = %v", time.Unix(0, at))
	}
}
