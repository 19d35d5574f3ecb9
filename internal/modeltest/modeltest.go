// Package modeltest holds what the algorithms' model tests share: a
// generic adapter (Sim) over a reference model, a generator of random
// requests whose instants go back and forth (Calls), and the checks run
// over them: RetryAfter is exact, InitialAt is exactly where a state
// becomes idle, a refund leaves a state deciding as if the grant had not
// been made, a model returns promptly on extreme configurations. What
// bounds the grants must keep is each algorithm's own, and stays in its
// tests.
//
// It imports no algorithm package: each test builds its Sim from its own
// model's methods.
package modeltest

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/internal/backend"
)

// T0 is the instant the step tables count from: 2026-01-01 UTC, a multiple
// of every window and period the tests use.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// Y2155 is where the documented range of decision instants ends: every
// window or fill time Validate accepts ends before check.Far for decisions
// before it.
var Y2155 = time.Date(2155, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// New returns the model newModel builds from c, and fails the test at once
// if c is refused.
func New[C, M any](t testing.TB, newModel func(C) (M, error), c C) *M {
	t.Helper()
	m, err := newModel(c)
	if err != nil {
		t.Fatalf("newModel(%+v): %v", c, err)
	}
	return &m
}

// Random is a configuration the random sequences run on, with the most
// their clock moves forward from one call to the next. Like Step, it is an
// alias of an unnamed struct so that tables may list its fields unkeyed.
type Random[C any] = struct {
	C   C
	Gap time.Duration
}

// EachRandom runs f in a subtest for each of rcs, named by its index and
// configuration, with the configuration and its Gap in nanoseconds.
func EachRandom[C any](t *testing.T, rcs []Random[C], f func(t *testing.T, c C, gap int64)) {
	t.Helper()
	for i, rc := range rcs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.C), func(t *testing.T) { f(t, rc.C, int64(rc.Gap)) })
	}
}

// Step is one request of a step table and the decision expected for it.
// Retry is checked for refusals only (a grant's RetryAfter is never read).
// It is an alias of an unnamed struct so that tables may list its fields
// unkeyed ({t0, 2, true, 1, 0}), as the tests did when each declared its
// own.
type Step = struct {
	At    int64
	N     int64
	OK    bool
	Rem   int64
	Retry time.Duration
}

// Run applies steps in order through step, starting from s, and checks
// each decision's Granted and Remaining, and a refusal's RetryAfter, to the
// nanosecond. Instants are reported relative to t0. It returns the state
// after the last step.
func Run[S any](t testing.TB, step func(S, int64, int64) (S, backend.Decision), t0 int64, s S, steps []Step) S {
	t.Helper()
	for i, st := range steps {
		var got backend.Decision
		s, got = step(s, st.At, st.N)
		if got.Granted != st.OK || got.Remaining != st.Rem {
			t.Errorf("step %d: Step(t0%+v, %d) = granted %v remaining %d, want %v %d",
				i, time.Duration(st.At-t0), st.N, got.Granted, got.Remaining, st.OK, st.Rem)
		}
		if !st.OK && got.RetryAfter != st.Retry {
			t.Errorf("step %d: Step(t0%+v, %d).RetryAfter = %v (%dns), want %v (%dns)",
				i, time.Duration(st.At-t0), st.N, got.RetryAfter, int64(got.RetryAfter), st.Retry, int64(st.Retry))
		}
	}
	return s
}

// Sim adapts a model to the generic checks.
type Sim[S any] struct {
	// Capacity is what an idle state grants at once (Limit, Burst).
	Capacity int64
	// Unlimited: the model grants everything, and its decisions report a
	// Remaining of -1 (no limit; a token bucket of rate.Inf).
	Unlimited bool
	Initial   func() S
	Step      func(s S, now, permits int64) (S, backend.Decision)
	InitialAt func(S) int64
	// Clone copies a state that Step may change in place; nil when a
	// state is a plain value.
	Clone func(S) S
	// GrantEnd is when a grant at effective instant at stops counting;
	// nil when InitialAt is checked against the decisions alone.
	GrantEnd func(at int64) int64
	// Far is check.Far: the latest instant a decision names, the cap of
	// RetryAfter and InitialAt.
	Far int64
	// IdleAtFar: the state must be idle at InitialAt even when that is Far
	// itself (otherwise an InitialAt of Far, or a newest decision at Far or
	// later, is not probed).
	IdleAtFar bool
	// Refusal, if set, checks more of an exact refusal (a refusal at an
	// instant no older than any before it) of n permits at now on s, with
	// RetryAfter retry: what is wrong, or "".
	Refusal func(s S, now, n int64, retry time.Duration) string
	// Refund and Made are the model's, for the Refund checks.
	Refund func(s S, now, at, permits int64) S
	Made   func(s S, now int64) int64
	// Charge is the model's, for CheckCharges; nil for a model that does
	// not settle.
	Charge func(s S, now, permits int64) S
}

func (m Sim[S]) clone(s S) S {
	if m.Clone == nil {
		return s
	}
	return m.Clone(s)
}

// Call is one request of a random sequence: N permits at instant At. A
// negative N is a charge of -N permits (Sim.Charge), which Exercise makes
// in its place.
type Call struct{ At, N int64 }

// Calls returns n requests whose instants follow a clock that starts at
// base and moves forward by up to gap, each read up to skew before the
// clock (a third of them), asking 0 (status check) to capacity permits.
// The sequence depends on r alone.
func Calls(r *rand.Rand, base int64, n int, gap, skew, capacity int64) []Call {
	cs := make([]Call, n)
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
		cs[i] = Call{at, p}
	}
	return cs
}

// Grant is a grant of N > 0 permits at effective instant At: the newest
// instant of any decision up to it. The models promise that a decision at
// an older instant is never more generous than one a moment later (it is
// made at the newest instant they have seen), and the memory backend,
// which reads its clock before its lock, decided it after all of those.
// Step is the grant's index in its sequence of calls.
type Grant struct {
	Step int
	At   int64
	N    int64
}

// Exercise runs cs on a fresh state and checks at every step that
// Remaining is in [0, Capacity]; that a refusal at an instant no older
// than any before it has an exact RetryAfter (CheckRetry) and passes
// m.Refusal; and that InitialAt is exactly where the state becomes idle,
// never while a grant counts (CheckInitialAt). After more than 5 failing
// steps it stops the test. It returns the grants at their effective
// instants, for the caller's bound.
func Exercise[S any](t testing.TB, m Sim[S], cs []Call) []Grant {
	t.Helper()
	s := m.Initial()
	seen := int64(math.MinInt64)
	var gs []Grant
	fails := 0
	for i, c := range cs {
		if c.N < 0 {
			s = m.Charge(s, c.At, -c.N)
			seen = max(seen, c.At)
			if msg := CheckInitialAt(m, s, seen, math.MinInt64); msg != "" {
				t.Errorf("step %d (charge of %d at %d): %s", i, -c.N, c.At, msg)
			}
			continue
		}
		newest := c.At >= seen
		var pre S
		if newest && c.N > 0 {
			pre = m.clone(s)
		}
		var d backend.Decision
		s, d = m.Step(s, c.At, c.N)
		seen = max(seen, c.At)
		if d.Granted && c.N > 0 {
			gs = append(gs, Grant{i, seen, c.N})
		}
		if (m.Unlimited && d.Remaining != -1) || (!m.Unlimited && (d.Remaining < 0 || d.Remaining > m.Capacity)) {
			t.Errorf("step %d: Remaining %d out of [0, %d] (or not -1 without a limit: %v)", i, d.Remaining, m.Capacity, m.Unlimited)
		}
		if !d.Granted && newest && c.N > 0 {
			if msg := CheckRetry(m, pre, c.At, c.N, d.RetryAfter); msg != "" {
				t.Errorf("step %d: %s", i, msg)
			}
			if m.Refusal != nil {
				if msg := m.Refusal(pre, c.At, c.N, d.RetryAfter); msg != "" {
					t.Errorf("step %d: %s", i, msg)
				}
			}
		}
		end := int64(math.MinInt64)
		if len(gs) > 0 && m.GrantEnd != nil {
			end = m.GrantEnd(gs[len(gs)-1].At)
		}
		if msg := CheckInitialAt(m, s, seen, end); msg != "" {
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

// CheckRetry checks that a refusal of n permits at now with RetryAfter r,
// on state s, is exact: r is in (0, Far-now], the same request on the same
// state is refused at now+r-1 and granted at now+r (unless now+r is Far,
// the documented cap). It returns what is wrong, or "".
func CheckRetry[S any](m Sim[S], s S, now, n int64, r time.Duration) string {
	if r <= 0 || now+int64(r) > m.Far {
		return fmt.Sprintf("refusal of %d at %d has RetryAfter %v: not in (0, Far-now]", n, now, r)
	}
	if _, d := m.Step(m.clone(s), now+int64(r)-1, n); d.Granted {
		return fmt.Sprintf("refusal of %d at %d with RetryAfter %v (%dns), but granted 1ns before", n, now, r, int64(r))
	}
	if now+int64(r) < m.Far {
		if _, d := m.Step(m.clone(s), now+int64(r), n); !d.Granted {
			return fmt.Sprintf("refusal of %d at %d with RetryAfter %v (%dns), and refused then too (RetryAfter %v)", n, now, r, int64(r), d.RetryAfter)
		}
	}
	return ""
}

// Idle reports whether s at now decides as the initial state: a status
// check finds the whole Capacity there (no limit: -1, when Unlimited), and
// the whole Capacity is granted.
func Idle[S any](m Sim[S], s S, now int64) bool {
	_, d := m.Step(m.clone(s), now, 0)
	_, all := m.Step(m.clone(s), now, m.Capacity)
	if m.Unlimited {
		return d.Remaining == -1 && all.Granted
	}
	return d.Remaining == m.Capacity && all.Granted
}

// CheckInitialAt checks that s, whose newest decision was at seen, is idle
// (Idle) from InitialAt(s) on and not 1ns before, and that InitialAt is no
// earlier than end, until which a grant still counts (math.MinInt64: none).
// Idle is probed at Far only if m.IdleAtFar. It returns what is wrong, or
// "".
func CheckInitialAt[S any](m Sim[S], s S, seen, end int64) string {
	at := m.InitialAt(s)
	if end > seen && at < end {
		return fmt.Sprintf("InitialAt %d, but a grant counts until %d", at, end)
	}
	if probe := max(at, seen); (probe < m.Far || m.IdleAtFar && probe == m.Far) && !Idle(m, s, probe) {
		return fmt.Sprintf("InitialAt %d, but not idle at %d", at, probe)
	}
	if at != math.MinInt64 && at-1 >= seen && at-1 >= end && Idle(m, s, at-1) {
		return fmt.Sprintf("InitialAt %d, but already idle 1ns before", at)
	}
	return ""
}

// Within runs f in a goroutine and fails the test if it has not returned
// after limit (or half the time left before the test's deadline, if less):
// a model that loops is a failure, not a hang. f reports through errorf,
// whose messages the test logs as errors once f has returned.
func Within(t *testing.T, limit time.Duration, what string, f func(errorf func(string, ...any))) {
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

// ExtremeBases are the instants CheckExtremeConfigs grants from: the
// epoch, 1ns after it, 1ns after T0, and the last day of 2154, just before
// Y2155.
var ExtremeBases = []int64{0, 1, T0 + 1, time.Date(2154, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()}

// CheckExtremeConfigs runs a subtest for each configuration of cfgs and
// each of ExtremeBases, in which the model must return within 5 seconds
// (Within). setup returns the model's Sim for a configuration, and the
// offsets from base to probe at. The whole Capacity must be granted at
// base on a fresh state; then (after a refused request for
// max(1, Capacity/2) more at base, if again) every refusal of 1 or
// Capacity permits at base+offset must be exact (CheckRetry), for the
// instants that are before Y2155 and not before base (overflowed);
// InitialAt must be in (base, Far], and pass CheckInitialAt with a grant
// counting until GrantEnd(base).
func CheckExtremeConfigs[C, S any](t *testing.T, cfgs []C, again bool, setup func(t *testing.T, c C) (Sim[S], []int64)) {
	t.Helper()
	for _, c := range cfgs {
		for _, base := range ExtremeBases {
			t.Run(fmt.Sprintf("%+v/%d", c, time.Unix(0, base).UTC().Year()), func(t *testing.T) {
				m, offsets := setup(t, c)
				Within(t, 5*time.Second, "the model", func(errorf func(string, ...any)) {
					s, d := m.Step(m.Initial(), base, m.Capacity)
					if !d.Granted {
						errorf("the whole Limit refused at %d", base)
						return
					}
					if again {
						s, _ = m.Step(s, base, max(1, m.Capacity/2)) // refused
					}
					for _, off := range offsets {
						at := base + off
						if at >= Y2155 || at < base { // past the documented range, or overflowed
							continue
						}
						for _, n := range []int64{1, m.Capacity} {
							if _, d := m.Step(m.clone(s), at, n); !d.Granted {
								if msg := CheckRetry(m, s, at, n, d.RetryAfter); msg != "" {
									errorf("%s", msg)
								}
							}
						}
					}
					ia := m.InitialAt(s)
					if ia <= base || ia > m.Far {
						errorf("InitialAt %d after a grant at %d", ia, base)
						return
					}
					if msg := CheckInitialAt(m, s, base, m.GrantEnd(base)); msg != "" {
						errorf("%s", msg)
					}
				})
			})
		}
	}
}

// SameDecisions checks that a and b decide alike (the whole Decision) for
// requests of 0, 1, 2, Capacity/2 and Capacity permits at 5 instants from
// at on, each up to gap after the one before (drawn from r). It stops the
// test at the first difference.
func SameDecisions[S any](t testing.TB, m Sim[S], a, b S, at, gap int64, r *rand.Rand) {
	t.Helper()
	for i := 0; i < 5; i++ {
		for _, n := range []int64{0, 1, 2, m.Capacity / 2, m.Capacity} {
			if n > m.Capacity {
				continue
			}
			_, da := m.Step(m.clone(a), at, n)
			_, db := m.Step(m.clone(b), at, n)
			if da != db {
				t.Fatalf("at %d, %d permits: %+v, but without the grant %+v", at, n, da, db)
			}
		}
		at += r.Int63n(gap + 1)
	}
}

// NeverLooser checks that a grants nothing that b refuses, for requests of
// 1, 2, Capacity/2 and Capacity permits at 5 instants from at on, each up
// to gap after the one before (drawn from r). It stops the test at the
// first such grant.
func NeverLooser[S any](t testing.TB, m Sim[S], a, b S, at, gap int64, r *rand.Rand) {
	t.Helper()
	for i := 0; i < 5; i++ {
		for _, n := range []int64{1, 2, m.Capacity / 2, m.Capacity} {
			if n < 1 || n > m.Capacity {
				continue
			}
			_, da := m.Step(m.clone(a), at, n)
			_, db := m.Step(m.clone(b), at, n)
			if da.Granted && !db.Granted {
				t.Fatalf("at %d, %d permits: granted after the refund, refused without the grant", at, n)
			}
		}
		at += r.Int63n(gap + 1)
	}
}

// CheckCloneIsDeep runs n calls (Calls, from seed 1, starting at T0, each
// up to gap after the one before and a third up to skew before the clock);
// after each call it steps a clone of the state through 20 more requests
// (up to probeGap apart) and checks that the state still decides as a
// replay of the calls up to that one does (SameDecisions, from that call's
// instant, up to probeGap apart).
func CheckCloneIsDeep[S any](t testing.TB, m Sim[S], n int, gap, skew, probeGap int64) {
	t.Helper()
	r := rand.New(rand.NewSource(1))
	cs := Calls(r, T0, n, gap, skew, m.Capacity)
	s := m.Initial()
	for i, c := range cs {
		s, _ = m.Step(s, c.At, c.N)
		c2 := m.Clone(s)
		for _, x := range Calls(r, c.At, 20, probeGap, 0, m.Capacity) {
			c2, _ = m.Step(c2, x.At, x.N)
		}
		replay := m.Initial()
		for _, x := range cs[:i+1] {
			replay, _ = m.Step(replay, x.At, x.N)
		}
		SameDecisions(t, m, s, replay, c.At, probeGap, r)
	}
}

// CheckOutOfOrder runs 3 sequences of 3000 calls (Calls, from seeds 1 to
// 3, starting at a random instant in the hour after T0, each up to gap
// after the one before and a third up to skew before the clock) through
// Exercise, and checks each sequence's grants with bound.
func CheckOutOfOrder[S any](t testing.TB, m Sim[S], gap, skew int64, bound func(gs []Grant, cs []Call)) {
	t.Helper()
	for seed := int64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewSource(seed))
		cs := Calls(r, T0+r.Int63n(int64(time.Hour)), 3000, gap, skew, m.Capacity)
		bound(Exercise(t, m, cs), cs)
	}
}

// CheckCharges runs 3 sequences of 2000 calls (Calls, from seeds 1 to 3,
// starting at T0, each up to gap after the one before and a third up to
// skew before the clock) through Exercise, one in eight of them a charge
// (Sim.Charge) of 1 to 3 times the capacity, so that states in debt, or
// over their limit, are decided: every refusal's RetryAfter must stay
// exact, Remaining in [0, Capacity], and InitialAt where the state is idle
// again. The charges must cost grants: the same sequences with status
// checks in their place grant more (but without a limit).
func CheckCharges[S any](t testing.TB, m Sim[S], gap, skew int64) {
	t.Helper()
	with, without := 0, 0
	for seed := int64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewSource(seed))
		cs := Calls(r, T0, 2000, gap, skew, m.Capacity)
		plain := make([]Call, len(cs))
		for i := range cs {
			plain[i] = cs[i]
			if r.Intn(8) == 0 {
				cs[i].N = -(1 + r.Int63n(3*m.Capacity))
				plain[i].N = 0
			}
		}
		with += len(Exercise(t, m, cs))
		without += len(Exercise(t, m, plain))
	}
	if !m.Unlimited && with >= without {
		t.Fatalf("the charges cost no grant: %d granted with them, %d without", with, without)
	}
}

// CheckRefundsKeepBound runs 3 sequences of 3000 calls (Calls, from seeds
// 1 to 3, starting at T0, each up to gap after the one before and a third
// up to skew before the clock) with refunds in the place of some calls
// (KeptAfterRefunds, refunding at the call's instant if atCall), and
// checks the grants not refunded with bound.
func CheckRefundsKeepBound[S any](t testing.TB, m Sim[S], gap, skew int64, atCall bool, bound func(kept []Grant, cs []Call)) {
	t.Helper()
	for seed := int64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewSource(seed))
		cs := Calls(r, T0, 3000, gap, skew, m.Capacity)
		bound(KeptAfterRefunds(m, cs, atCall, r), cs)
	}
}

// CheckRefundSameInstant runs 2000 calls (Calls, from seed 3, starting at
// T0, each up to gap after the one before and a third up to skew before
// the clock) and, after every grant, refunds it at the same instant on a
// copy of the new state. Given the instant the grant was
// made at (m.Made), the refunded state must decide as the state before the
// grant (SameDecisions, from the newest instant decided, up to gap apart,
// drawn from r); for a grant at an instant older than one decided before,
// a refund given that older instant itself must admit never more than the
// state before the grant (NeverLooser). It fails the test if no grant was
// at an older instant: the sequence then tests too little.
func CheckRefundSameInstant[S any](t testing.TB, m Sim[S], gap, skew int64) {
	t.Helper()
	r := rand.New(rand.NewSource(3))
	cs := Calls(r, T0, 2000, gap, skew, m.Capacity)
	s := m.Initial()
	seen := int64(math.MinInt64)
	older := 0
	for _, c := range cs {
		before := m.clone(s)
		next, d := m.Step(s, c.At, c.N)
		inOrder := c.At >= seen
		seen = max(seen, c.At)
		if d.Granted && c.N > 0 {
			refunded := m.Refund(m.clone(next), c.At, m.Made(next, c.At), c.N)
			SameDecisions(t, m, refunded, before, seen, gap, r)
			if !inOrder {
				older++
				NeverLooser(t, m, m.Refund(m.clone(next), c.At, c.At, c.N), before, seen, gap, r)
			}
		}
		s = next
	}
	if older == 0 {
		t.Fatal("no grant at an older instant was refunded: the sequence tests too little")
	}
}

// KeptAfterRefunds runs cs on a fresh state and, in the place of about a
// quarter of the calls (drawn from r), refunds instead one of the 4 latest
// grants not refunded yet, given the instant it was made at (m.Made), as
// the memory backend does. The refund is made at the newest instant
// decided before it, or, if atCall, at the instant of the call whose place
// it takes. It returns the grants not refunded, at their effective
// instants, for the caller to check against its bound.
func KeptAfterRefunds[S any](m Sim[S], cs []Call, atCall bool, r *rand.Rand) []Grant {
	s := m.Initial()
	seen := int64(math.MinInt64)
	var gs []Grant
	refunded := map[int]bool{}
	made := map[int]int64{} // the instant each grant was made at, which its refund is given
	for j, c := range cs {
		if len(gs) > 0 && r.Intn(4) == 0 {
			if g := gs[len(gs)-1-r.Intn(min(len(gs), 4))]; !refunded[g.Step] {
				refunded[g.Step] = true
				now := seen
				if atCall {
					now = c.At
				}
				s = m.Refund(s, now, made[g.Step], g.N)
				continue
			}
		}
		seen = max(seen, c.At)
		var d backend.Decision
		if s, d = m.Step(s, c.At, c.N); d.Granted && c.N > 0 {
			gs = append(gs, Grant{j, seen, c.N})
			made[j] = m.Made(s, c.At)
		}
	}
	var kept []Grant
	for _, g := range gs {
		if !refunded[g.Step] {
			kept = append(kept, g)
		}
	}
	return kept
}
