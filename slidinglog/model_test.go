package slidinglog

import (
	"testing"
	"time"

	"github.com/limitkit/ratelimit/internal/backend"
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
	t0 = modeltest.T0
	t1 = t0 + 1*int64(d)
	t2 = t0 + 2*int64(d)
	t5 = t0 + 5*int64(d)
	t9 = t0 + 9*int64(d)
)

const ms = int64(time.Millisecond)

// step is one request and the decision expected for it.
type step = modeltest.Step

func run(t *testing.T, m *model, s state, steps []step) state {
	t.Helper()
	return modeltest.Run(t, m.Step, t0, s, steps)
}

func mustModel(t *testing.T, c Config) *model { t.Helper(); return modeltest.New(t, newModel, c) }

// TestStep: Limit 3 in any 500ms; a grant leaves the window 500ms after it.
func TestStep(t *testing.T) {
	m := mustModel(t, Config{Limit: 3, Window: 500 * time.Millisecond})
	run(t, m, m.Initial(), []step{
		{t0, 1, true, 2, 0},
		{t1, 2, true, 0, 0},
		{t2, 1, false, 0, 300 * time.Millisecond}, // t0's leaves at t5
		{t2, 3, false, 0, 400 * time.Millisecond}, // t1's at t6
		{t5 - 1, 0, false, 0, 1},
		{t5, 1, true, 0, 0},
		{t5, 0, false, 0, 100 * time.Millisecond},
		{t9, 2, true, 0, 0}, // t1's and t5's have left... t5's leaves at t0+1s
		{t9, 1, false, 0, 100 * time.Millisecond},
	})
}

// TestOlderGrantKeptInOrder is the reproduction of the log out of order:
// Limit 2, a grant at T and one at T-0.9s. The second was appended after
// the first and InitialAt, reading the newest entry, said idle at
// T+0.1s while T's grant was in the window; its RetryAfter walked the log
// in the wrong order. At T+0.2s a request for 2 must wait for both to
// leave: RetryAfter exact, and InitialAt no earlier than T+Window.
func TestOlderGrantKeptInOrder(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: time.Second})
	T := t9
	s := run(t, m, m.Initial(), []step{
		{T, 1, true, 1, 0},
		{T - 900*ms, 1, true, 0, 0},
	})
	if at := m.InitialAt(s); at < T+int64(time.Second) {
		t.Errorf("InitialAt = T%+v, before T+Window, while T's grant is in the window", time.Duration(at-T))
	}
	sm := simOf(m)
	_, d := m.Step(m.Clone(s), T+200*ms, 2)
	if d.Granted || d.RetryAfter <= 0 {
		t.Fatalf("Step(T+0.2s, 2) = %+v, want a refusal with a positive RetryAfter", d)
	}
	if msg := modeltest.CheckRetry(sm, s, T+200*ms, 2, d.RetryAfter); msg != "" {
		t.Error(msg)
	}
	if msg := modeltest.CheckInitialAt(sm, s, T, T+int64(time.Second)); msg != "" {
		t.Error(msg)
	}
}

// TestRefusalInstantForgotten: a refusal at T+0.5s, then a grant decided
// after it with an older clock reading (T+0.1s, newer than the log's
// newest entry). Under the lock that grant happened after T+0.5s, so it
// must count until T+1.5s; recorded at T+0.1s it leaves at T+1.1s, and 3
// permits pass within 0.6s with Limit 2. TestOutOfOrder's bound, checked
// at decision instants, covers this in general.
func TestRefusalInstantForgotten(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: time.Second})
	T := t0
	run(t, m, m.Initial(), []step{
		{T, 1, true, 1, 0},
		{T + 500*ms, 2, false, 1, 500 * time.Millisecond},
		{T + 100*ms, 1, true, 0, 0},
		{T + 1100*ms, 2, false, 1, 400 * time.Millisecond},
	})
	// A status check at T+1s drops T's entry; a grant decided after it
	// with the clock read at T+0.5s finds the log empty and is recorded at
	// T+0.5s, so it leaves at T+1.5s, 0.5s after it was decided.
	m = mustModel(t, Config{Limit: 1, Window: time.Second})
	run(t, m, m.Initial(), []step{
		{T, 1, true, 0, 0},
		{T + 1000*ms, 0, true, 1, 0},
		{T + 500*ms, 1, true, 0, 0},
		{T + 1600*ms, 1, false, 0, 400 * time.Millisecond},
	})
}

// ---- sliding log ----

func simOf(m *model) modeltest.Sim[state] {
	return modeltest.Sim[state]{
		Capacity:  m.limit,
		Initial:   m.Initial,
		Step:      m.Step,
		InitialAt: m.InitialAt,
		Clone:     m.Clone,
		GrantEnd:  func(at int64) int64 { return at + m.window },
		Far:       check.Far,
		Refund:    m.Refund,
		Charge:    m.Charge,
		Made:      m.Made,
	}
}

// checkBound checks that the grants in any half-open interval of length
// Window add up to at most Limit.
func checkBound(t *testing.T, m *model, gs []modeltest.Grant, cs []modeltest.Call) {
	t.Helper()
	var sum int64
	i := 0
	for _, g := range gs {
		sum += g.N
		for g.At-gs[i].At >= m.window {
			sum -= gs[i].N
			i++
		}
		if sum > m.limit {
			t.Fatalf("%d permits granted in [%d, %d] (steps %d..%d), less than Window %v apart, Limit %d\ncalls: %v",
				sum, gs[i].At, g.At, gs[i].Step, g.Step, time.Duration(m.window), m.limit, cs[max(0, gs[i].Step-5):g.Step+1])
		}
	}
}

var randomConfigs = []modeltest.Random[Config]{
	{Config{Limit: 1, Window: time.Second}, 400 * time.Millisecond},
	{Config{Limit: 2, Window: time.Second}, 300 * time.Millisecond},
	{Config{Limit: 3, Window: 333 * time.Millisecond}, 60 * time.Millisecond},
	{Config{Limit: 10, Window: 7}, 2},
	{Config{Limit: 5, Window: time.Second + 1}, 150 * time.Millisecond},
	{Config{Limit: 2, Window: 1}, 1},
	{Config{Limit: 50, Window: 999 * time.Millisecond}, 15 * time.Millisecond},
}

// TestOutOfOrder runs a few thousand requests per configuration whose
// instants go back by up to a window and forward again, and checks the
// bound, RetryAfter and InitialAt at every step.
func TestOutOfOrder(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckOutOfOrder(t, simOf(m), gap, m.window, func(gs []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, gs, cs) })
	})
}

// TestCloneIsDeep: Step on a clone leaves the original deciding as a replay
// of its calls does.
func TestCloneIsDeep(t *testing.T) {
	m := mustModel(t, Config{Limit: 10, Window: 500 * time.Millisecond})
	modeltest.CheckCloneIsDeep(t, simOf(m), 400, 40*ms, 500*ms, 200*ms)
}

// TestExtremeConfigs: the largest and smallest values Validate accepts, and
// a log of many entries.
func TestExtremeConfigs(t *testing.T) {
	const big = 1 << 53
	var cfgs []Config
	for _, limit := range []int{1, 2, big} {
		cfgs = append(cfgs,
			Config{Limit: limit, Window: 1},
			Config{Limit: limit, Window: check.MaxDuration},
			Config{Limit: limit, Window: check.MaxDuration - 1},
		)
	}
	modeltest.CheckExtremeConfigs(t, cfgs, false, func(t *testing.T, c Config) (modeltest.Sim[state], []int64) {
		m := mustModel(t, c)
		return simOf(m), []int64{0, 1, m.window / 2, m.window - 1, m.window}
	})
	t.Run("many entries", func(t *testing.T) {
		const n = 20000
		m := mustModel(t, Config{Limit: n, Window: check.MaxDuration})
		modeltest.Within(t, 10*time.Second, "the model", func(errorf func(string, ...any)) {
			sm := simOf(m)
			s := m.Initial()
			for i := int64(0); i < n; i++ {
				var d backend.Decision
				if s, d = m.Step(s, t0+i*1000, 1); !d.Granted {
					errorf("grant %d refused", i)
					return
				}
			}
			for _, p := range []int64{1, n / 2, n} {
				at := t0 + n*1000
				_, d := m.Step(m.Clone(s), at, p)
				if d.Granted {
					errorf("%d more granted on a full log", p)
					continue
				}
				if want := time.Duration(t0 + (p-1)*1000 + m.window - at); d.RetryAfter != want {
					errorf("RetryAfter for %d = %v, want %v", p, d.RetryAfter, want)
				}
				if msg := modeltest.CheckRetry(sm, s, at, p, d.RetryAfter); msg != "" {
					errorf("%s", msg)
				}
			}
			if msg := modeltest.CheckInitialAt(sm, s, t0+n*1000, t0+(n-1)*1000+m.window); msg != "" {
				errorf("%s", msg)
			}
		})
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

// TestRefundAfterWindowEnded: a refund of a grant that has left the window
// gives nothing back, even when a Step has dropped its entry and a later
// grant's entry is the oldest at or after its instant.
func TestRefundAfterWindowEnded(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: time.Second})
	T := t0
	s := run(t, m, m.Initial(), []step{
		{T, 1, true, 1, 0},
		{T + 500*ms, 1, true, 0, 0},
		{T + 1000*ms, 0, true, 1, 0}, // T's grant leaves
	})
	s = m.Refund(s, T+1000*ms, T, 1)
	run(t, m, s, []step{
		{T + 1000*ms, 2, false, 1, 500 * time.Millisecond}, // T+0.5s's grant is in the window
	})
	// And without a Step in between.
	s = run(t, m, m.Initial(), []step{
		{T, 1, true, 1, 0},
		{T + 500*ms, 1, true, 0, 0},
	})
	s = m.Refund(s, T+1000*ms, T, 1)
	run(t, m, s, []step{
		{T + 1000*ms, 2, false, 1, 500 * time.Millisecond},
		{T + 1000*ms, 1, true, 0, 0},
	})
}

// TestRefundNeverExceedsBound: random requests and refunds of recent
// grants (given the instant each was made at, as the memory backend does),
// at their instant or later, after other decisions; the grants not
// refunded keep within Limit in any Window.
func TestRefundNeverExceedsBound(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		// In order: the refunds alone are under test here.
		// A refund in a call's place, at the newest instant decided.
		modeltest.CheckRefundsKeepBound(t, simOf(m), gap, 0, false, func(kept []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, kept, cs) })
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
