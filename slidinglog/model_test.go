package slidinglog

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
)

// Tests of the reference model, in the style of x/time/rate's rate_test.go:
// fixed instants t0..t9 and step tables run through one t.Helper function,
// then properties over random sequences whose instants go back by up to a
// window (the memory backend reads its clock before its lock), the extreme
// configurations Validate accepts, and Refund.

const d = 100 * time.Millisecond

var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	t1 = t0 + 1*int64(d)
	t2 = t0 + 2*int64(d)
	t5 = t0 + 5*int64(d)
	t9 = t0 + 9*int64(d)
)

const ms = int64(time.Millisecond)

// step is one request and the decision expected for it. retry is checked
// for refusals only.
type step struct {
	at    int64
	n     int64
	ok    bool
	rem   int64
	retry time.Duration
}

func run(t *testing.T, m *Model, s State, steps []step) State {
	t.Helper()
	for i, st := range steps {
		var got ratelimit.Decision
		s, got = m.Step(s, st.at, st.n)
		if got.Granted != st.ok || got.Remaining != st.rem {
			t.Errorf("step %d: Step(t0%+v, %d) = granted %v remaining %d, want %v %d",
				i, time.Duration(st.at-t0), st.n, got.Granted, got.Remaining, st.ok, st.rem)
		}
		if !st.ok && got.RetryAfter != st.retry {
			t.Errorf("step %d: Step(t0%+v, %d).RetryAfter = %v, want %v", i, time.Duration(st.at-t0), st.n, got.RetryAfter, st.retry)
		}
	}
	return s
}

func model(t *testing.T, c Config) *Model {
	t.Helper()
	m, err := NewModel(c)
	if err != nil {
		t.Fatalf("NewModel(%+v): %v", c, err)
	}
	return &m
}

// TestStep: Limit 3 in any 500ms; a grant leaves the window 500ms after it.
func TestStep(t *testing.T) {
	m := model(t, Config{Limit: 3, Window: 500 * time.Millisecond})
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
	m := model(t, Config{Limit: 2, Window: time.Second})
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
	if msg := checkRetry(sm, s, T+200*ms, 2, d.RetryAfter); msg != "" {
		t.Error(msg)
	}
	if msg := checkInitialAt(sm, s, T, T+int64(time.Second)); msg != "" {
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
	m := model(t, Config{Limit: 2, Window: time.Second})
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
	m = model(t, Config{Limit: 1, Window: time.Second})
	run(t, m, m.Initial(), []step{
		{T, 1, true, 0, 0},
		{T + 1000*ms, 0, true, 1, 0},
		{T + 500*ms, 1, true, 0, 0},
		{T + 1600*ms, 1, false, 0, 400 * time.Millisecond},
	})
}

// ---- the harness shared by the window models' tests ----

// sim adapts a model to the generic checks.
type sim[S any] struct {
	capacity  int64
	initial   func() S
	step      func(S, int64, int64) (S, ratelimit.Decision)
	initialAt func(S) int64
	clone     func(S) S
	// grantEnd is when a grant at effective instant at stops counting.
	grantEnd func(at int64) int64
}

type call struct{ at, n int64 }

// calls returns n requests whose instants follow a clock that moves forward
// by up to gap, each read up to skew before the clock (a third of them),
// asking 0 (status check) to capacity permits.
func calls(r *rand.Rand, base int64, n int, gap, skew, capacity int64) []call {
	cs := make([]call, n)
	clock := base
	for i := range cs {
		if r.Intn(4) > 0 {
			clock += r.Int63n(gap + 1)
		}
		at := clock
		if r.Intn(3) == 0 {
			at -= r.Int63n(skew + 1)
		}
		var p int64
		switch r.Intn(10) {
		case 0:
			p = 0
		case 1:
			p = capacity
		default:
			p = 1 + r.Int63n(min(capacity, 3))
		}
		cs[i] = call{at, p}
	}
	return cs
}

// grant is a grant of n > 0 permits at effective instant at: the newest
// instant of any decision up to it. The models promise that a decision at
// an older instant is never more generous than one a moment later, and the
// memory backend, which reads its clock before its lock, decided it after
// all of those.
type grant struct {
	step int
	at   int64
	n    int64
}

// exercise runs cs on a fresh state and checks at every step that a refusal
// at an instant no older than any before it has an exact RetryAfter, and
// that InitialAt is exactly where the state becomes idle, never while a
// grant counts. It returns the grants at their effective instants.
func exercise[S any](t *testing.T, m sim[S], cs []call) []grant {
	t.Helper()
	s := m.initial()
	seen := int64(math.MinInt64)
	var gs []grant
	fails := 0
	for i, c := range cs {
		newest := c.at >= seen
		var pre S
		if newest && c.n > 0 {
			pre = m.clone(s)
		}
		var d ratelimit.Decision
		s, d = m.step(s, c.at, c.n)
		seen = max(seen, c.at)
		if d.Granted && c.n > 0 {
			gs = append(gs, grant{i, seen, c.n})
		}
		if d.Remaining < 0 || d.Remaining > m.capacity {
			t.Errorf("step %d: Remaining %d out of [0, %d]", i, d.Remaining, m.capacity)
		}
		if !d.Granted && newest && c.n > 0 {
			if msg := checkRetry(m, pre, c.at, c.n, d.RetryAfter); msg != "" {
				t.Errorf("step %d: %s", i, msg)
			}
		}
		end := int64(math.MinInt64)
		if len(gs) > 0 && m.grantEnd != nil {
			end = m.grantEnd(gs[len(gs)-1].at)
		}
		if msg := checkInitialAt(m, s, seen, end); msg != "" {
			t.Errorf("step %d (%+v): %s", i, c, msg)
		}
		if t.Failed() {
			if fails++; fails > 5 {
				t.Fatalf("stopping at step %d of %d; calls up to it: %v", i, len(cs), cs[max(0, i-10):i+1])
			}
		}
	}
	return gs
}

// checkRetry checks that a refusal of n permits at now with RetryAfter r,
// on state s, is exact: refused at now+r-1, granted at now+r (unless now+r
// is check.Far, the documented cap). It returns what is wrong, or "".
func checkRetry[S any](m sim[S], s S, now, n int64, r time.Duration) string {
	if r <= 0 || now+int64(r) > check.Far {
		return fmt.Sprintf("refusal of %d at %d has RetryAfter %v: not in (0, Far-now]", n, now, r)
	}
	if _, d := m.step(m.clone(s), now+int64(r)-1, n); d.Granted {
		return fmt.Sprintf("refusal of %d at %d with RetryAfter %v (%dns), but granted 1ns before", n, now, r, int64(r))
	}
	if now+int64(r) < check.Far {
		if _, d := m.step(m.clone(s), now+int64(r), n); !d.Granted {
			return fmt.Sprintf("refusal of %d at %d with RetryAfter %v (%dns), and refused then too (RetryAfter %v)", n, now, r, int64(r), d.RetryAfter)
		}
	}
	return ""
}

// idle reports whether s at now decides as the initial state: the whole
// capacity is there.
func idle[S any](m sim[S], s S, now int64) bool {
	_, d := m.step(m.clone(s), now, 0)
	_, all := m.step(m.clone(s), now, m.capacity)
	return d.Remaining == m.capacity && all.Granted
}

// checkInitialAt checks that s, whose newest decision was at seen, is idle
// from InitialAt(s) on and not 1ns before, where idle is: deciding as the
// initial state, and no grant still counting (a grant counts until end).
func checkInitialAt[S any](m sim[S], s S, seen, end int64) string {
	at := m.initialAt(s)
	if end > seen && at < end {
		return fmt.Sprintf("InitialAt %d, but a grant counts until %d", at, end)
	}
	if probe := max(at, seen); probe < check.Far && !idle(m, s, probe) {
		return fmt.Sprintf("InitialAt %d, but not idle at %d", at, probe)
	}
	if at != math.MinInt64 && at-1 >= seen && at-1 >= end && idle(m, s, at-1) {
		return fmt.Sprintf("InitialAt %d, but already idle 1ns before", at)
	}
	return ""
}

// within runs f in a goroutine and fails the test if it has not returned
// after limit (or half the time left before the test's deadline): a model
// that loops is a failure, not a hang. f reports through errorf.
func within(t *testing.T, limit time.Duration, what string, f func(errorf func(string, ...any))) {
	t.Helper()
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) / 2; left < limit {
			limit = left
		}
	}
	var errs []string
	errorf := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(errorf)
	}()
	select {
	case <-done:
		for _, e := range errs {
			t.Error(e)
		}
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

// sameDecisions checks that a and b decide alike (the whole Decision) for
// every request size at a few instants from at on.
func sameDecisions[S any](t *testing.T, m sim[S], a, b S, at, gap int64, r *rand.Rand) {
	t.Helper()
	for i := 0; i < 5; i++ {
		for _, n := range []int64{0, 1, 2, m.capacity / 2, m.capacity} {
			if n > m.capacity {
				continue
			}
			_, da := m.step(m.clone(a), at, n)
			_, db := m.step(m.clone(b), at, n)
			if da != db {
				t.Fatalf("at %d, %d permits: %+v, but without the grant %+v", at, n, da, db)
			}
		}
		at += r.Int63n(gap + 1)
	}
}

// ---- sliding log ----

func simOf(m *Model) sim[State] {
	return sim[State]{
		capacity:  m.limit,
		initial:   m.Initial,
		step:      m.Step,
		initialAt: m.InitialAt,
		clone:     m.Clone,
		grantEnd:  func(at int64) int64 { return at + m.window },
	}
}

// checkBound checks that the grants in any half-open interval of length
// Window add up to at most Limit.
func checkBound(t *testing.T, m *Model, gs []grant, cs []call) {
	t.Helper()
	var sum int64
	i := 0
	for _, g := range gs {
		sum += g.n
		for g.at-gs[i].at >= m.window {
			sum -= gs[i].n
			i++
		}
		if sum > m.limit {
			t.Fatalf("%d permits granted in [%d, %d] (steps %d..%d), less than Window %v apart, Limit %d\ncalls: %v",
				sum, gs[i].at, g.at, gs[i].step, g.step, time.Duration(m.window), m.limit, cs[max(0, gs[i].step-5):g.step+1])
		}
	}
}

var randomConfigs = []struct {
	c   Config
	gap time.Duration
}{
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
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := model(t, rc.c)
			for seed := int64(1); seed <= 3; seed++ {
				r := rand.New(rand.NewSource(seed))
				cs := calls(r, t0+r.Int63n(int64(time.Hour)), 3000, int64(rc.gap), m.window, m.limit)
				checkBound(t, m, exercise(t, simOf(m), cs), cs)
			}
		})
	}
}

// TestCloneIsDeep: Step on a clone leaves the original deciding as a replay
// of its calls does.
func TestCloneIsDeep(t *testing.T) {
	m := model(t, Config{Limit: 10, Window: 500 * time.Millisecond})
	r := rand.New(rand.NewSource(1))
	cs := calls(r, t0, 400, 40*ms, 500*ms, 10)
	s := m.Initial()
	for i, c := range cs {
		s, _ = m.Step(s, c.at, c.n)
		c2 := m.Clone(s)
		for _, x := range calls(r, c.at, 20, 200*ms, 0, 10) {
			c2, _ = m.Step(c2, x.at, x.n)
		}
		replay := m.Initial()
		for _, x := range cs[:i+1] {
			replay, _ = m.Step(replay, x.at, x.n)
		}
		sameDecisions(t, simOf(m), s, replay, c.at, 200*ms, r)
	}
}

// y2155 is where the documented range of decision instants ends: every
// window Validate accepts ends before check.Far for decisions before it.
var y2155 = time.Date(2155, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// TestExtremeConfigs: the largest and smallest values Validate accepts, and
// a log of many entries.
func TestExtremeConfigs(t *testing.T) {
	const big = 1 << 53
	bases := []int64{0, 1, t0 + 1, time.Date(2154, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()}
	var cfgs []Config
	for _, limit := range []int{1, 2, big} {
		cfgs = append(cfgs,
			Config{Limit: limit, Window: 1},
			Config{Limit: limit, Window: check.MaxDuration},
			Config{Limit: limit, Window: check.MaxDuration - 1},
		)
	}
	for _, c := range cfgs {
		for _, base := range bases {
			t.Run(fmt.Sprintf("%+v/%d", c, time.Unix(0, base).UTC().Year()), func(t *testing.T) {
				m := model(t, c)
				within(t, 5*time.Second, "the model", func(errorf func(string, ...any)) {
					sm := simOf(m)
					s, d := m.Step(m.Initial(), base, m.limit)
					if !d.Granted {
						errorf("the whole Limit refused at %d", base)
						return
					}
					for _, at := range []int64{base, base + 1, base + m.window/2, base + m.window - 1, base + m.window} {
						if at >= y2155 || at < base {
							continue
						}
						for _, n := range []int64{1, m.limit} {
							if _, d := m.Step(m.Clone(s), at, n); !d.Granted {
								if msg := checkRetry(sm, s, at, n, d.RetryAfter); msg != "" {
									errorf("%s", msg)
								}
							}
						}
					}
					if msg := checkInitialAt(sm, s, base, base+m.window); msg != "" {
						errorf("%s", msg)
					}
				})
			})
		}
	}
	t.Run("many entries", func(t *testing.T) {
		const n = 20000
		m := model(t, Config{Limit: n, Window: check.MaxDuration})
		within(t, 10*time.Second, "the model", func(errorf func(string, ...any)) {
			sm := simOf(m)
			s := m.Initial()
			for i := int64(0); i < n; i++ {
				var d ratelimit.Decision
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
				if msg := checkRetry(sm, s, at, p, d.RetryAfter); msg != "" {
					errorf("%s", msg)
				}
			}
			if msg := checkInitialAt(sm, s, t0+n*1000, t0+(n-1)*1000+m.window); msg != "" {
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
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := model(t, rc.c)
			sm := simOf(m)
			r := rand.New(rand.NewSource(3))
			s := m.Initial()
			seen := int64(math.MinInt64)
			older := 0
			for _, c := range calls(r, t0, 2000, int64(rc.gap), m.window, m.limit) {
				before := m.Clone(s)
				next, d := m.Step(s, c.at, c.n)
				inOrder := c.at >= seen
				seen = max(seen, c.at)
				if d.Granted && c.n > 0 {
					refunded := m.Refund(m.Clone(next), c.at, m.Made(next, c.at), c.n)
					sameDecisions(t, sm, refunded, before, seen, int64(rc.gap), r)
					if !inOrder {
						older++
						neverLooser(t, sm, m.Refund(m.Clone(next), c.at, c.at, c.n), before, seen, int64(rc.gap), r)
					}
				}
				s = next
			}
			if older == 0 {
				t.Fatal("no grant at an older instant was refunded: the sequence tests too little")
			}
		})
	}
}

// neverLooser checks that a grants nothing that b refuses, at a few
// instants from at on.
func neverLooser[S any](t *testing.T, m sim[S], a, b S, at, gap int64, r *rand.Rand) {
	t.Helper()
	for i := 0; i < 5; i++ {
		for _, n := range []int64{1, 2, m.capacity / 2, m.capacity} {
			if n < 1 || n > m.capacity {
				continue
			}
			_, da := m.step(m.clone(a), at, n)
			_, db := m.step(m.clone(b), at, n)
			if da.Granted && !db.Granted {
				t.Fatalf("at %d, %d permits: granted after the refund, refused without the grant", at, n)
			}
		}
		at += r.Int63n(gap + 1)
	}
}

// TestRefundAfterWindowEnded: a refund of a grant that has left the window
// gives nothing back, even when a Step has dropped its entry and a later
// grant's entry is the oldest at or after its instant.
func TestRefundAfterWindowEnded(t *testing.T) {
	m := model(t, Config{Limit: 2, Window: time.Second})
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
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := model(t, rc.c)
			for seed := int64(1); seed <= 3; seed++ {
				r := rand.New(rand.NewSource(seed))
				// In order: the refunds alone are under test here.
				cs := calls(r, t0, 3000, int64(rc.gap), 0, m.limit)
				s := m.Initial()
				seen := int64(math.MinInt64)
				var gs []grant
				refunded := map[int]bool{}
				made := map[int]int64{} // the instant each grant was made at, which its refund is given
				for j, c := range cs {
					if len(gs) > 0 && r.Intn(4) == 0 {
						if g := gs[len(gs)-1-r.Intn(min(len(gs), 4))]; !refunded[g.step] {
							// A refund in this call's place, at the newest instant decided.
							refunded[g.step] = true
							s = m.Refund(s, seen, made[g.step], g.n)
							continue
						}
					}
					seen = max(seen, c.at)
					var d ratelimit.Decision
					if s, d = m.Step(s, c.at, c.n); d.Granted && c.n > 0 {
						gs = append(gs, grant{j, seen, c.n})
						made[j] = m.Made(s, c.at)
					}
				}
				var kept []grant
				for _, g := range gs {
					if !refunded[g.step] {
						kept = append(kept, g)
					}
				}
				checkBound(t, m, kept, cs)
			}
		})
	}
}
