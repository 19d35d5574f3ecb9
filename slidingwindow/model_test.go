package slidingwindow

import (
	"fmt"
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
	t5 = t0 + 5*int64(d)
	t9 = t0 + 9*int64(d)
)

// step is one request and the decision expected for it.
type step = modeltest.Step

func run(t *testing.T, m *model, s state, steps []step) state {
	t.Helper()
	return modeltest.Run(t, m.Step, t0, s, steps)
}

func mustModel(t *testing.T, c Config) *model { t.Helper(); return modeltest.New(t, newModel, c) }

const ms = int64(time.Millisecond)

// TestStepSegmented: Limit 10, Window 500ms in 5 segments of 100ms. A grant
// comes back when its segment leaves the window, so two grants of the whole
// Limit can be 450ms apart (the doc's example: at 450ms and at 900ms), less
// than a Window: 2×Limit within one Window's length, not Limit×(1+1/5).
func TestStepSegmented(t *testing.T) {
	m := mustModel(t, Config{Limit: 10, Window: 500 * time.Millisecond, Segments: 5})
	run(t, m, m.Initial(), []step{
		{t0 + 450*ms, 10, true, 0, 0},
		{t0 + 450*ms, 1, false, 0, 450 * time.Millisecond}, // its segment [400ms, 500ms) leaves at 900ms
		{t0 + 899*ms, 10, false, 0, time.Millisecond},
		{t0 + 900*ms, 10, true, 0, 0},
		{t0 + 900*ms, 0, false, 0, 500 * time.Millisecond},
	})
	m = mustModel(t, Config{Limit: 3, Window: 300 * time.Millisecond, Segments: 3})
	run(t, m, m.Initial(), []step{
		{t0, 1, true, 2, 0},
		{t1, 1, true, 1, 0},
		{t1 + 50*ms, 2, false, 1, 150 * time.Millisecond}, // t0's segment leaves at t3
		{t1 + 99*ms, 1, true, 0, 0},
		{t0 + 300*ms, 2, false, 1, 100 * time.Millisecond}, // t1's segment holds 2 until t4
		{t0 + 300*ms, 1, true, 0, 0},
		{t0 + 300*ms, 1, false, 0, 100 * time.Millisecond},
	})
}

// TestStepWeighted: Limit 10, Window 1s. The previous window's 10 weigh 9
// once a tenth of the next window has passed.
func TestStepWeighted(t *testing.T) {
	m := mustModel(t, Config{Limit: 10, Window: time.Second})
	run(t, m, m.Initial(), []step{
		{t5, 10, true, 0, 0},
		{t5, 1, false, 0, 600 * time.Millisecond},
		{t0 + 1000*ms, 1, false, 0, 100 * time.Millisecond},
		{t0 + 1100*ms, 1, true, 0, 0},
		{t0 + 1500*ms, 4, true, 0, 0}, // 10×0.5 + 1 + 4
		{t0 + 1500*ms, 1, false, 0, 100 * time.Millisecond},
	})
}

// TestOlderInstantCountsInNewestSegment: a grant at an instant older than
// the state's newest segment counts in that segment, so it comes back no
// earlier than one decided a moment later.
func TestOlderInstantCountsInNewestSegment(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: 300 * time.Millisecond, Segments: 3})
	run(t, m, m.Initial(), []step{
		{t5, 0, true, 2, 0}, // moves the ring to t5's segment
		{t1, 2, true, 0, 0}, // counted in t5's segment, not t1's
		{t0 + 700*ms, 1, false, 0, 100 * time.Millisecond},
		{t0 + 800*ms, 2, true, 0, 0},
	})
	m = mustModel(t, Config{Limit: 2, Window: 300 * time.Millisecond})
	run(t, m, m.Initial(), []step{
		{t9, 0, true, 2, 0},
		{t5, 2, true, 0, 0}, // counted in t9's window [t0+900ms, t0+1200ms)
		{t0 + 1200*ms, 1, false, 0, 150 * time.Millisecond},
	})
}

// ---- sliding window ----

func simOf(m *model) modeltest.Sim[state] {
	end := func(at int64) int64 { return check.FloorStart(at, m.seg) + m.window }
	if m.segments == 0 {
		end = func(at int64) int64 { return check.FloorStart(at, m.window) + 2*m.window }
	}
	return modeltest.Sim[state]{
		Capacity:  m.limit,
		Initial:   m.Initial,
		Step:      m.Step,
		InitialAt: m.InitialAt,
		Clone:     m.Clone,
		GrantEnd:  end,
		Far:       check.Far,
		Refund:    m.Refund,
		Charge:    m.Charge,
		Made:      m.Made,
	}
}

// spanMax returns the most permits granted at effective instants within a
// closed span of length span (b - a <= span), and the steps where it starts
// and ends.
func spanMax(gs []modeltest.Grant, span int64) (most int64, from, to int) {
	var sum int64
	i := 0
	for _, g := range gs {
		sum += g.N
		for g.At-gs[i].At > span {
			sum -= gs[i].N
			i++
		}
		if sum > most {
			most, from, to = sum, gs[i].Step, g.Step
		}
	}
	return most, from, to
}

// checkBound checks the documented bounds. Segmented: at most Limit in any
// closed span of Window - Window/Segments, and in any window of Window's
// length that starts on a segment boundary; at most 2×Limit in any closed
// span of Window. Weighted: at most Limit in each epoch-aligned window (its
// current window's count alone must fit); over a sliding window there is no
// hard bound.
func checkBound(t *testing.T, m *model, gs []modeltest.Grant, cs []modeltest.Call) {
	t.Helper()
	fail := func(what string, n, limit int64, from, to int) {
		t.Helper()
		t.Fatalf("%d permits granted in %s (steps %d..%d), more than %d\ncalls: %v", n, what, from, to, limit, cs[max(0, from-5):to+1])
	}
	if m.segments == 0 {
		var start, sum int64
		first := 0
		for i, g := range gs {
			if w := check.FloorStart(g.At, m.window); i == 0 || w != start {
				start, sum, first = w, 0, g.Step
			}
			if sum += g.N; sum > m.limit {
				fail(fmt.Sprintf("the aligned window [%d, %d)", start, start+m.window), sum, m.limit, first, g.Step)
			}
		}
		return
	}
	if n, from, to := spanMax(gs, m.window-m.seg); n > m.limit {
		fail(fmt.Sprintf("a span of Window-Window/Segments = %v", time.Duration(m.window-m.seg)), n, m.limit, from, to)
	}
	if n, from, to := spanMax(gs, m.window); n > 2*m.limit {
		fail(fmt.Sprintf("a span of Window = %v", time.Duration(m.window)), n, 2*m.limit, from, to)
	}
	// Windows starting on a segment boundary: [FloorStart(g.at), +Window).
	for i := range gs {
		start := check.FloorStart(gs[i].At, m.seg)
		var sum int64
		for j := i; j < len(gs) && gs[j].At < start+m.window; j++ {
			if sum += gs[j].N; sum > m.limit {
				fail(fmt.Sprintf("the window [%d, %d) starting on a segment boundary", start, start+m.window), sum, m.limit, gs[i].Step, gs[j].Step)
			}
		}
	}
}

var randomConfigs = []modeltest.Random[Config]{
	{Config{Limit: 10, Window: 500 * time.Millisecond, Segments: 5}, 40 * time.Millisecond},
	{Config{Limit: 1, Window: time.Second, Segments: 1}, 400 * time.Millisecond},
	{Config{Limit: 1, Window: time.Second, Segments: 4}, 300 * time.Millisecond},
	{Config{Limit: 3, Window: 21, Segments: 7}, 4},
	{Config{Limit: 5, Window: 999 * time.Millisecond, Segments: 3}, 150 * time.Millisecond},
	{Config{Limit: 2, Window: 1, Segments: 1}, 1},
	{Config{Limit: 1, Window: time.Second}, 400 * time.Millisecond},
	{Config{Limit: 7, Window: 333 * time.Millisecond}, 40 * time.Millisecond},
	{Config{Limit: 3, Window: 7}, 2},
	{Config{Limit: 4, Window: 1}, 1},
}

// TestOutOfOrder runs a few thousand requests per configuration whose
// instants go back by up to a window and forward again, and checks the
// bounds, RetryAfter and InitialAt.
func TestOutOfOrder(t *testing.T) {
	modeltest.EachRandom(t, randomConfigs, func(t *testing.T, c Config, gap int64) {
		m := mustModel(t, c)
		modeltest.CheckOutOfOrder(t, simOf(m), gap, m.window, func(gs []modeltest.Grant, cs []modeltest.Call) { checkBound(t, m, gs, cs) })
	})
}

// TestCloneIsDeep: Step on a clone leaves the original deciding as a replay
// of its calls does.
func TestCloneIsDeep(t *testing.T) {
	m := mustModel(t, Config{Limit: 10, Window: 500 * time.Millisecond, Segments: 5})
	modeltest.CheckCloneIsDeep(t, simOf(m), 500, 40*ms, 500*ms, 200*ms)
}

// TestExtremeConfigs: the largest and smallest values Validate accepts,
// MaxSegments among them.
func TestExtremeConfigs(t *testing.T) {
	const big = 1 << 53
	var cfgs []Config
	for _, limit := range []int{1, 2, big} {
		cfgs = append(cfgs,
			Config{Limit: limit, Window: 1},
			Config{Limit: limit, Window: check.MaxDuration},
			Config{Limit: limit, Window: check.MaxDuration - 1},
			Config{Limit: limit, Window: 1, Segments: 1},
			Config{Limit: limit, Window: check.MaxDuration, Segments: 1},
			Config{Limit: limit, Window: MaxSegments, Segments: MaxSegments},
			Config{Limit: limit, Window: check.MaxDuration, Segments: MaxSegments},
			Config{Limit: limit, Window: 3 * MaxSegments, Segments: MaxSegments},
		)
	}
	for _, c := range cfgs {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	// A refused request after the grant, so that the probes see a state
	// that has decided twice at base.
	modeltest.CheckExtremeConfigs(t, cfgs, true, func(t *testing.T, c Config) (modeltest.Sim[state], []int64) {
		m := mustModel(t, c)
		return simOf(m), []int64{0, 1, m.seg, m.window / 2, m.window - 1, m.window, 2*m.window - 1}
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

// TestRefundAfterWindowEnded: a refund of a grant that no longer counts
// gives nothing back, whatever was granted since.
func TestRefundAfterWindowEnded(t *testing.T) {
	m := mustModel(t, Config{Limit: 2, Window: 300 * time.Millisecond, Segments: 3})
	s := run(t, m, m.Initial(), []step{
		{t0, 2, true, 0, 0},
		{t0 + 300*ms, 2, true, 0, 0}, // t0's segment has left
	})
	s = m.Refund(s, t0+300*ms, t0, 2)
	run(t, m, s, []step{{t0 + 300*ms, 1, false, 0, 300 * time.Millisecond}})

	m = mustModel(t, Config{Limit: 2, Window: 300 * time.Millisecond})
	s = run(t, m, m.Initial(), []step{
		{t0, 2, true, 0, 0},
		{t0 + 600*ms, 2, true, 0, 0}, // t0's window weighs nothing any more
	})
	s = m.Refund(s, t0+600*ms, t0, 2)
	run(t, m, s, []step{{t0 + 600*ms, 1, false, 0, 450 * time.Millisecond}}) // 2×(1-x/300ms)+1 <= 2 from x = 150ms of the next window
}

// TestRefundNeverExceedsBound: random requests and refunds of recent
// grants (given the instant each was made at, as the memory backend does),
// at their instant or later, after other decisions; the grants not
// refunded keep within the bounds.
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
