package fixedwindow

import (
	"testing"
	"time"

	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/modeltest"
)

// Tests of the reference model, in the style of x/time/rate's rate_test.go:
// fixed instants t0..t9 and step tables run through one t.Helper function,
// then properties over random sequences whose instants go back by up to a
// window (the memory backend reads its clock before its lock), the extreme
// configurations Validate accepts, and Refund.

const d = 100 * time.Millisecond

var (
	t0 = modeltest.T0 // a multiple of every window below
	t1 = t0 + 1*int64(d)
	t2 = t0 + 2*int64(d)
	t3 = t0 + 3*int64(d)
	t9 = t0 + 9*int64(d)
)

// step is one request and the decision expected for it.
type step = modeltest.Step

func run(t *testing.T, m *model, s state, steps []step) state {
	t.Helper()
	return modeltest.Run(t, m.Step, t0, s, steps)
}

func mustModel(t *testing.T, c Config) *model { t.Helper(); return modeltest.New(t, newModel, c) }

// TestStep: Limit 3 per 300ms window aligned to the epoch (t0 is a multiple).
func TestStep(t *testing.T) {
	m := mustModel(t, Config{Limit: 3, Window: 300 * time.Millisecond})
	run(t, m, m.Initial(), []step{
		{t0, 2, true, 1, 0},
		{t1, 2, false, 1, 200 * time.Millisecond},
		{t2, 1, true, 0, 0},
		{t3 - 1, 0, false, 0, 1}, // a status check wants one permit
		{t3, 3, true, 0, 0},
		{t3, 1, false, 0, 300 * time.Millisecond},
		{t9, 3, true, 0, 0},
	})
}

// TestOlderInstantCountsInStateWindow: a decision at an instant in a window
// older than the state's counts in the state's window: at most Limit there.
func TestOlderInstantCountsInStateWindow(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: 300 * time.Millisecond})
	run(t, m, m.Initial(), []step{
		{t3, 1, true, 1, 0},
		{t2, 1, true, 0, 0}, // the previous window: counted in t3's
		{t1, 1, false, 0, 500 * time.Millisecond},
		{t3, 1, false, 0, 300 * time.Millisecond},
		{t3 + 300*int64(time.Millisecond), 2, true, 0, 0},
	})
}

// ---- fixed window ----

func simOf(m *model) modeltest.Sim[state] {
	return modeltest.Sim[state]{
		Capacity:  m.limit,
		Initial:   m.Initial,
		Step:      m.Step,
		InitialAt: m.InitialAt,
		GrantEnd:  func(at int64) int64 { return check.FloorStart(at, m.window) + m.window },
		Far:       check.Far,
		Refund:    m.Refund,
		Charge:    m.Charge,
		Made:      m.Made,
	}
}

// checkBound checks that the grants in each epoch-aligned window add up to
// at most Limit.
func checkBound(t *testing.T, m *model, gs []modeltest.Grant, cs []modeltest.Call) {
	t.Helper()
	var start, sum int64
	first := 0
	for i, g := range gs {
		if w := check.FloorStart(g.At, m.window); i == 0 || w != start {
			start, sum, first = w, 0, i
		}
		if sum += g.N; sum > m.limit {
			t.Fatalf("%d permits granted in the window [%d, %d) (steps %d..%d), Limit %d\ncalls: %v",
				sum, start, start+m.window, gs[first].Step, g.Step, m.limit, cs[max(0, gs[first].Step-5):g.Step+1])
		}
	}
}

var randomConfigs = []modeltest.Random[Config]{
	{Config{Limit: 1, Window: time.Second}, 400 * time.Millisecond},
	{Config{Limit: 3, Window: 333 * time.Millisecond}, 60 * time.Millisecond},
	{Config{Limit: 10, Window: 7}, 2},
	{Config{Limit: 5, Window: time.Second + 1}, 150 * time.Millisecond},
	{Config{Limit: 2, Window: 1}, 1},
}

// TestOutOfOrder runs a few thousand requests per configuration whose
// instants go back by up to a window and forward again, and checks the
// bound in every aligned window, RetryAfter and InitialAt.
func TestOutOfOrder(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckOutOfOrder(t, simOf(m), gap, m.window, func(gs []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, gs, cs) })
	})
}

// TestExtremeConfigs: the largest and smallest values Validate accepts.
func TestExtremeConfigs(t *testing.T) {
	const big = 1 << 53
	cfgs := []Config{
		{Limit: 1, Window: 1},
		{Limit: big, Window: 1},
		{Limit: 1, Window: check.MaxDuration},
		{Limit: big, Window: check.MaxDuration},
		{Limit: 3, Window: check.MaxDuration - 1},
	}
	modeltest.CheckExtremeConfigs(t, cfgs, false, func(t *testing.T, c Config) (modeltest.Sim[state], []int64) {
		m := mustModel(t, c)
		return simOf(m), []int64{0, 1, m.window / 2, m.window - 1, m.window, int64(check.MaxDuration) / 2}
	})
}

// ---- Refund ----

// TestRefundSameInstant: a grant then a Refund at the same instant, given
// the instant the grant was made at (Made: the caller's, or for an older
// one the state's, where it counted), leaves the model deciding as if the
// grant had never been made, for grants at older instants too. Given the
// older instant itself instead, the model documents a stricter refund: that
// is checked to admit never more than without the grant.
func TestRefundSameInstant(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckRefundSameInstant(t, simOf(m), gap, m.window)
	})
}

// TestRefundAfterWindowEnded: a refund of a grant whose window has ended
// gives nothing back, whatever was granted since in the new window. The
// Refunder contract: "a refund never lets more through than the limit".
func TestRefundAfterWindowEnded(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: time.Second})
	s := run(t, m, m.Initial(), []step{
		{t0, 2, true, 0, 0},
		{t0 + int64(time.Second), 2, true, 0, 0}, // the next window
	})
	s = m.Refund(s, t0+int64(time.Second), t0, 2)
	run(t, m, s, []step{
		{t0 + int64(time.Second), 1, false, 0, time.Second}, // 3 in one window
	})
	// And with nothing decided in between.
	s = run(t, m, m.Initial(), []step{{t0, 2, true, 0, 0}})
	s = m.Refund(s, t0+int64(time.Second), t0, 2)
	run(t, m, s, []step{
		{t0 + int64(time.Second), 2, true, 0, 0},
		{t0 + int64(time.Second), 1, false, 0, time.Second},
	})
}

// TestRefundNeverExceedsBound: random requests and refunds of recent
// grants (given the instant each was made at, as the memory backend does),
// at their instant or later, after other decisions; the grants not
// refunded keep within Limit per window.
func TestRefundNeverExceedsBound(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		// A refund in a call's place, at the newest instant decided.
		modeltest.CheckRefundsKeepBound(t, simOf(m), gap, m.window, false, func(kept []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, kept, cs) })
	})
}

// TestCharges: a state over its limit (settlements' charges among the
// requests) keeps RetryAfter and InitialAt exact.
func TestCharges(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckCharges(t, simOf(m), gap, m.window)
	})
}
