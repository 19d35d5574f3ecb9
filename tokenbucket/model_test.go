package tokenbucket

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/modeltest"
)

// Tests of the reference model, in the style of x/time/rate's rate_test.go:
// fixed instants t0..t9 and step tables run through one t.Helper function,
// then properties over random sequences whose instants go back by up to a
// skew (the memory backend reads its clock before its lock), the extreme
// configurations Validate accepts, parity with x/time/rate, and Refund.

const d = 100 * time.Millisecond

var (
	t0 = modeltest.T0
	t1 = t0 + 1*int64(d)
	t2 = t0 + 2*int64(d)
	t3 = t0 + 3*int64(d)
	t4 = t0 + 4*int64(d)
	t9 = t0 + 9*int64(d)
)

// step is one request and the decision expected for it.
type step = modeltest.Step

// run applies steps to s in order and checks each decision.
func run(t *testing.T, m *model, s state, steps []step) state {
	t.Helper()
	return modeltest.Run(t, m.Step, t0, s, steps)
}

func mustModel(t *testing.T, c Config) *model { t.Helper(); return modeltest.New(t, newModel, c) }

// simOf adapts m to modeltest's checks. The bucket must be idle at an
// InitialAt of check.Far too, and a refusal's When and Reserve must name
// the instant its RetryAfter does.
func simOf(m *model) modeltest.Sim[state] {
	return modeltest.Sim[state]{
		Capacity:  m.burst,
		Unlimited: m.inf,
		Initial:   m.Initial,
		Step:      m.Step,
		InitialAt: m.InitialAt,
		Far:       check.Far,
		IdleAtFar: true,
		Refusal: func(s state, now, n int64, r time.Duration) string {
			var msgs []string
			if w := m.When(s, now, n); w != now+int64(r) {
				msgs = append(msgs, fmt.Sprintf("When = now%+v, RetryAfter %v", time.Duration(w-now), r))
			}
			if _, due, ok := m.Reserve(s, now, n); due != now+int64(r) || ok != (due < check.Far) {
				msgs = append(msgs, fmt.Sprintf("Reserve due now%+v ok %v, RetryAfter %v", time.Duration(due-now), ok, r))
			}
			return strings.Join(msgs, "; ")
		},
		Refund: m.Refund,
		Charge: m.Charge,
		Made:   m.Made,
	}
}

// TestStepBurst3 is x/time/rate's TestLimiterBurst3, with the RetryAfter of
// every refusal: the 1ns grace makes it 1ns below a token's 100ms.
func TestStepBurst3(t *testing.T) {
	m := mustModel(t, Config{Rate: 10, Burst: 3})
	const tok = 100*time.Millisecond - 1
	run(t, m, m.Initial(), []step{
		{t0, 2, true, 1, 0},
		{t0, 2, false, 1, tok},
		{t0, 1, true, 0, 0},
		{t0, 1, false, 0, tok},
		{t1, 2, false, 1, tok},
		{t2, 1, true, 1, 0},
		{t3, 1, true, 1, 0},
		{t4, 1, true, 1, 0},
		{t4, 1, true, 0, 0},
		{t4, 1, false, 0, tok},
		{t9, 3, true, 0, 0},
		{t9, 0, false, 0, tok}, // a status check wants one token
	})
}

// TestStepInterval: 2 tokens at every multiple of 300ms since the epoch
// (t0 is one), at most 3 saved up.
func TestStepInterval(t *testing.T) {
	m := mustModel(t, Config{Period: 300 * time.Millisecond, PerPeriod: 2, Burst: 3})
	run(t, m, m.Initial(), []step{
		{t0, 3, true, 0, 0},
		{t0, 1, false, 0, 300 * time.Millisecond},
		{t2, 1, false, 0, 100 * time.Millisecond},
		{t3 - 1, 2, false, 0, 1},
		{t3, 2, true, 0, 0},
		{t3, 1, false, 0, 300 * time.Millisecond},
		{t9, 3, true, 0, 0}, // t9 = t0+900ms: full again
		{t9 + 1, 3, false, 0, 600*time.Millisecond - 1},
	})
}

// TestOlderInstantRefillsNothing is the reproduction of the double refill:
// a decision at an instant older than the state's (another goroutine
// decided first) must not refill the interval between them twice.
// Rate 1, Burst 2: at T one token is left; at T-0.9s nothing refills, so
// the second takes the last token; at T+0.1s only 0.1 token has come back.
// All three were granted.
func TestOlderInstantRefillsNothing(t *testing.T) {
	m := mustModel(t, Config{Rate: 1, Burst: 2})
	T := t9
	run(t, m, m.Initial(), []step{
		{T, 1, true, 1, 0},
		{T - 900*int64(time.Millisecond), 1, true, 0, 0},
		{T + 100*int64(time.Millisecond), 1, false, 0, 900*time.Millisecond - 1},
	})
	// As x/time/rate's TestLimiterJumpBackwards, but never more than a
	// moment later would have granted.
	m = mustModel(t, Config{Rate: 10, Burst: 3})
	run(t, m, m.Initial(), []step{
		{t1, 1, true, 2, 0},
		{t0, 1, true, 1, 0},
		{t0, 1, true, 0, 0},
		{t0, 1, false, 0, 100*time.Millisecond - 1 + time.Duration(t1-t0)},
		{t1, 1, false, 0, 100*time.Millisecond - 1},
		{t2, 1, true, 0, 0},
		{t2, 1, false, 0, 100*time.Millisecond - 1},
	})
}

// TestRetryAfterLikeXTimeRate: Rate 5, Burst 5, emptied at T; at T+7ms one
// token is 193ms of refill away less the 1ns grace, the instant at which
// x/time/rate's AllowN grants it. When names that instant and Reserve's
// due is it too.
func TestRetryAfterLikeXTimeRate(t *testing.T) {
	m := mustModel(t, Config{Rate: 5, Burst: 5})
	T := t0
	at := T + 7*int64(time.Millisecond)
	s := run(t, m, m.Initial(), []step{
		{T, 5, true, 0, 0},
		{at, 1, false, 0, 192999999},
	})
	const r = 192999999
	if got := m.When(s, at, 1); got != at+r {
		t.Errorf("When(s, T+7ms, 1) = T+7ms%+v, want +%v", time.Duration(got-at), time.Duration(r))
	}
	if _, due, ok := m.Reserve(s, at, 1); !ok || due != at+r {
		t.Errorf("Reserve(s, T+7ms, 1) = due T+7ms%+v ok %v, want +%v true", time.Duration(due-at), ok, time.Duration(r))
	}
	if _, d := m.Step(s, at+r-1, 1); d.Granted {
		t.Errorf("granted at T+7ms+%v, 1ns before RetryAfter", time.Duration(r-1))
	}
	if _, d := m.Step(s, at+r, 1); !d.Granted {
		t.Errorf("refused at T+7ms+%v, the RetryAfter", time.Duration(r))
	}
	// The oracle agrees on both instants.
	for _, c := range []struct {
		at int64
		ok bool
	}{{at + r - 1, false}, {at + r, true}} {
		lim := rate.NewLimiter(5, 5)
		lim.AllowN(time.Unix(0, T), 5)
		if got := lim.AllowN(time.Unix(0, c.at), 1); got != c.ok {
			t.Errorf("x/time/rate AllowN(T+7ms+%v, 1) = %v, want %v", time.Duration(c.at-at), got, c.ok)
		}
	}
}

// TestHugeDebtIsRefused: Rate 1e-9 (one token in 31.7 years), Burst 1.
// Nine reservations after the bucket's token put it 9 tokens (285 years)
// into debt; asking one more makes ten, 317 years, which overflowed a
// Duration to a negative number that counted as "fits". A reservation due
// past check.Far is refused and changes nothing.
func TestHugeDebtIsRefused(t *testing.T) {
	m := mustModel(t, Config{Rate: 1e-9, Burst: 1})
	T := int64(time.Second) // near the epoch, so that 9 tokens' wait ends before Far
	s := m.Initial()
	for i := int64(0); i <= 9; i++ {
		var due int64
		var ok bool
		s, due, ok = m.Reserve(s, T, 1)
		if want := T + i*1e18; !ok || due < want-1000 || due > want { // float64 rounding: 1e-15 relative
			t.Errorf("reservation %d: due %v ok %v, want about %v (i×31.7 years) true", i, due, ok, want)
		}
	}
	if s.Tokens != -9 {
		t.Errorf("after reserving 9 tokens of debt, Tokens = %v, want -9", s.Tokens)
	}
	for _, n := range []int64{0, 1} {
		_, d := m.Step(s, T, n)
		if d.Granted {
			t.Errorf("Step(s in 285 years of debt, T, %d) granted", n)
		}
		if d.RetryAfter != time.Duration(check.Far-T) {
			t.Errorf("Step(s, T, %d).RetryAfter = %v, want the cap Far-T = %v", n, d.RetryAfter, time.Duration(check.Far-T))
		}
	}
	if got := m.When(s, T, 1); got != check.Far {
		t.Errorf("When(s, T, 1) = %v, want Far", got)
	}
	next, due, ok := m.Reserve(s, T, 1)
	if ok || next != s {
		t.Errorf("Reserve(s, T, 1) past Far = %+v due %v ok %v, want s unchanged and ok false", next, due, ok)
	}
	if due < check.Far {
		t.Errorf("Reserve(s, T, 1) past Far reports due %v, before Far", due)
	}
}

// TestRetryAfterNotCapped: Rate rate.Every(95 years), Burst 1, in 2026: a
// token is back in 2121, before check.Far (2255), so the RetryAfter is exact,
// not cut at 2116 (2^62 ns, an earlier cap).
func TestRetryAfterNotCapped(t *testing.T) {
	m := mustModel(t, Config{Rate: rate.Every(95 * 365 * 24 * time.Hour), Burst: 1})
	s, _ := m.Step(m.Initial(), t0, 1)
	_, d := m.Step(s, t0, 1)
	if d.Granted {
		t.Fatal("second token granted at once")
	}
	r := int64(d.RetryAfter)
	if at := time.Unix(0, t0+r).UTC(); at.Year() != 2120 && at.Year() != 2121 {
		t.Errorf("RetryAfter names %v, want 95 years after 2026-01-01", at)
	}
	if msg := modeltest.CheckRetry(simOf(m), s, t0, 1, d.RetryAfter); msg != "" {
		t.Error(msg)
	}
}

// ---- random sequences with out-of-order instants ----

// checkContinuous checks that the permits granted in any span [a, b] of
// effective instants are at most Burst + Rate×(b-a), plus Rate×1ns for the
// grace of fits, plus float rounding.
func checkContinuous(t *testing.T, burst int64, r float64, gs []modeltest.Grant, cs []modeltest.Call) {
	t.Helper()
	if len(gs) == 0 {
		return
	}
	base := gs[0].At
	best, bi := math.Inf(-1), 0 // max over i of r×x_i - (permits before i)
	sum := 0.0
	before := make([]float64, len(gs)) // permits granted before each grant
	for j, g := range gs {
		x := float64(g.At-base) / 1e9
		before[j] = sum
		if c := r*x - sum; c > best {
			best, bi = c, j
		}
		sum += float64(g.N)
		excess := sum - r*x + best
		tol := 1e-9*(float64(burst)+sum+r*x) + r*1e-9
		if excess > float64(burst)+tol {
			a := gs[bi]
			t.Fatalf("%v permits granted in [%d, %d] (steps %d..%d, a span of %v): more than Burst %d + Rate %v × span = %v\ncalls: %v",
				sum-before[bi], a.At, g.At, a.Step, g.Step, time.Duration(g.At-a.At), burst, r,
				float64(burst)+r*float64(g.At-a.At)/1e9, cs[max(0, a.Step-5):g.Step+1])
		}
	}
}

// checkInterval checks that the permits granted in any span [a, b] are at
// most Burst + PerPeriod × (multiples of Period in (a, b]).
func checkInterval(t *testing.T, burst, period, per int64, gs []modeltest.Grant, cs []modeltest.Call) {
	t.Helper()
	if len(gs) == 0 {
		return
	}
	k0 := check.FloorStart(gs[0].At, period) / period
	tick := func(at int64) int64 { return check.FloorStart(at, period)/period - k0 }
	best, bi := int64(math.MinInt64), 0
	var sum int64
	for j, g := range gs {
		if c := per*tick(g.At) - sum; c > best {
			best, bi = c, j
		}
		sum += g.N
		if excess := sum - per*tick(g.At) + best; excess > burst {
			a := gs[bi]
			t.Fatalf("granted %d permits in [%d, %d] (steps %d..%d), more than Burst %d + %d×%d refills\ncalls: %v",
				excess+per*(tick(g.At)-tick(a.At)), a.At, g.At, a.Step, g.Step, burst, per, tick(g.At)-tick(a.At), cs[max(0, a.Step-5):g.Step+1])
		}
	}
}

// bound returns the check of m's bound on grants: checkInterval for an
// interval bucket, checkContinuous otherwise.
func bound(t *testing.T, m *model) func(gs []modeltest.Grant, cs []modeltest.Call) {
	return func(gs []modeltest.Grant, cs []modeltest.Call) {
		t.Helper()
		if m.period > 0 {
			checkInterval(t, m.burst, m.period, m.perPeriod, gs, cs)
		} else {
			checkContinuous(t, m.burst, m.limit, gs, cs)
		}
	}
}

var randomConfigs = []struct {
	c         Config
	gap, skew time.Duration
}{
	{Config{Rate: 1, Burst: 1}, 1500 * time.Millisecond, time.Second},
	{Config{Rate: 10, Burst: 3}, 80 * time.Millisecond, 300 * time.Millisecond},
	{Config{Rate: 0.7, Burst: 5}, 2 * time.Second, 7 * time.Second},
	{Config{Rate: 1.0 / 3, Burst: 2}, 5 * time.Second, 6 * time.Second},
	{Config{Rate: 1e6, Burst: 7}, 3 * time.Microsecond, 7 * time.Microsecond},
	{Config{Rate: 3e9, Burst: 5}, 2, 2}, // three tokens a nanosecond: the 1ns grace matters
	{Config{Period: time.Second, PerPeriod: 1, Burst: 1}, 1500 * time.Millisecond, time.Second},
	{Config{Period: 333 * time.Millisecond, PerPeriod: 2, Burst: 5}, 300 * time.Millisecond, 333 * time.Millisecond},
	{Config{Period: 7, PerPeriod: 3, Burst: 4}, 9, 7},
	{Config{Period: time.Second, PerPeriod: 5, Burst: 2}, time.Second, time.Second},
}

// TestOutOfOrder runs a few thousand requests per configuration whose
// instants go back by up to a skew and forward again, and checks the bound,
// RetryAfter, When, Reserve and InitialAt at every step.
func TestOutOfOrder(t *testing.T) {
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := mustModel(t, rc.c)
			modeltest.CheckOutOfOrder(t, simOf(m), int64(rc.gap), int64(rc.skew), bound(t, m))
		})
	}
	t.Run("Inf", func(t *testing.T) {
		m := mustModel(t, Config{Rate: rate.Inf, Burst: 3})
		r := rand.New(rand.NewSource(1))
		for _, c := range modeltest.Calls(r, t0, 1000, int64(time.Millisecond), int64(time.Millisecond), 3) {
			if _, d := m.Step(m.Initial(), c.At, c.N); !d.Granted {
				t.Fatalf("rate.Inf refused %v", c)
			}
		}
		modeltest.Exercise(t, simOf(m), modeltest.Calls(r, t0, 1000, 10, 10, 3))
	})
}

// TestStatusCheckInstantForgotten: a status check at T+0.9s on a full
// bucket (Burst 1, Rate 1) changes nothing, so a grant decided after it
// with an older clock reading (T) refills from T: the next token comes at
// T+1s, 0.1s after the status check. Under the lock the grant happened
// after T+0.9s, so two permits pass within 0.1s with Burst 1. The
// decision-instants bound of TestOutOfOrder checks this in general.
func TestStatusCheckInstantForgotten(t *testing.T) {
	m := mustModel(t, Config{Rate: 1, Burst: 1})
	T := t0
	ms := int64(time.Millisecond)
	run(t, m, m.Initial(), []step{
		{T + 900*ms, 0, true, 1, 0},
		{T, 1, true, 0, 0},
		{T + 1000*ms, 1, false, 0, 900*time.Millisecond - 1},
	})
}

// ---- extreme configurations ----

// minRate is the smallest rate Validate accepts for burst: Burst/Rate is 100 years.
func minRate(t *testing.T, burst int) rate.Limit {
	r := float64(burst) / check.MaxDuration.Seconds()
	for (Config{Rate: rate.Limit(r), Burst: burst}).Validate() != nil {
		r = math.Nextafter(r, math.Inf(1))
	}
	if below := math.Nextafter(r, 0); (Config{Rate: rate.Limit(below), Burst: burst}).Validate() == nil {
		t.Fatalf("Rate %v is valid for Burst %d, below %v", below, burst, r)
	}
	return rate.Limit(r)
}

// TestExtremeConfigs: the largest and smallest values Validate accepts.
// Step, When, Reserve and InitialAt return promptly, a refusal's RetryAfter
// is exact (or the cap Far-now), and InitialAt is where the bucket is full.
func TestExtremeConfigs(t *testing.T) {
	const big = 1 << 53
	cfgs := []Config{
		{Rate: rate.Inf, Burst: 1},
		{Rate: rate.Inf, Burst: big},
		{Rate: minRate(t, 1), Burst: 1},
		{Rate: minRate(t, 2), Burst: 2},
		{Rate: minRate(t, big), Burst: big},
		{Rate: math.MaxFloat64, Burst: 1},
		{Rate: math.MaxFloat64, Burst: big},
		{Rate: 1e-9, Burst: 1},
		{Rate: 1, Burst: 3_000_000_000},
		{Rate: 1e9, Burst: big},
		{Period: 1, PerPeriod: 1, Burst: 1},
		{Period: 1, PerPeriod: 1, Burst: big},
		{Period: 1, PerPeriod: big, Burst: big},
		{Period: check.MaxDuration, PerPeriod: 1, Burst: 1},
		{Period: check.MaxDuration, PerPeriod: 1, Burst: big},
		{Period: check.MaxDuration, PerPeriod: big, Burst: 1},
		{Period: check.MaxDuration - 1, PerPeriod: 3, Burst: 7},
	}
	bases := []int64{0, 1, t0, time.Date(2154, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()}
	for _, c := range cfgs {
		if c.Validate() != nil {
			continue
		}
		for _, base := range bases {
			t.Run(fmt.Sprintf("%+v/%v", c, time.Unix(0, base).UTC().Format("2006")), func(t *testing.T) {
				m := mustModel(t, c)
				modeltest.Within(t, 5*time.Second, "the model", func(errorf func(string, ...any)) { extreme(errorf, m, base) })
			})
		}
	}
}

// extreme drains the bucket at base, asks again at once and later, and
// checks every refusal and InitialAt, reporting through errorf.
func extreme(errorf func(string, ...any), m *model, base int64) {
	sm := simOf(m)
	b := m.burst
	s := m.Initial()
	s, d := m.Step(s, base, b)
	if !d.Granted {
		errorf("full bucket refused Burst %d at %d", b, base)
		return
	}
	for _, at := range []int64{base, base + 1, base + int64(time.Second), base + int64(check.MaxDuration)/2} {
		for _, n := range []int64{1, 2, b / 2, b} {
			if n < 1 || n > b || at >= modeltest.Y2155 {
				continue
			}
			_, d := m.Step(s, at, n)
			w := m.When(s, at, n)
			_, due, ok := m.Reserve(s, at, n)
			if d.Granted {
				if w != at || due != at || !ok {
					errorf("granted %d at %d, but When %d, Reserve due %d ok %v", n, at, w, due, ok)
				}
				continue
			}
			if msg := modeltest.CheckRetry(sm, s, at, n, d.RetryAfter); msg != "" {
				errorf("%s", msg)
			}
			if w != at+int64(d.RetryAfter) || due != w || ok != (w < check.Far) {
				errorf("Step(%d) at %d: RetryAfter %v, When +%v, Reserve due +%v ok %v", n, at, d.RetryAfter, time.Duration(w-at), time.Duration(due-at), ok)
			}
		}
	}
	ia := m.InitialAt(s)
	if ia == math.MinInt64 {
		if !modeltest.Idle(sm, s, base) {
			errorf("InitialAt says idle, but not idle at %d", base)
		}
		return
	}
	if ia > check.Far || ia <= base {
		errorf("InitialAt %d after draining at %d: not in (base, Far]", ia, base)
		return
	}
	if ia < check.Far && !modeltest.Idle(sm, s, ia) {
		errorf("not idle at InitialAt %d", ia)
	}
	if modeltest.Idle(sm, s, ia-1) {
		errorf("idle 1ns before InitialAt %d", ia)
	}
}

// ---- parity with golang.org/x/time/rate ----

// TestParityWithXTimeRateModel: on non-decreasing instants, Step grants
// exactly what rate.Limiter.AllowN grants, and the bucket holds the same
// float64 as TokensAt, bit for bit.
func TestParityWithXTimeRateModel(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	var grants, refusals int
	for seq := 0; seq < 300; seq++ {
		var lim float64
		switch seq % 4 {
		case 0:
			lim = float64(1 + r.Intn(1000))
		case 1:
			lim = r.Float64() * 10
		case 2:
			lim = r.ExpFloat64() * 1e6
		default:
			lim = 1 / float64(1+r.Intn(100)) // 1/3, 1/7...: no exact binary form
		}
		lim = max(lim, 1e-3)
		burst := 1 + r.Intn(20)
		m := mustModel(t, Config{Rate: rate.Limit(lim), Burst: burst})
		oracle := rate.NewLimiter(rate.Limit(lim), burst)
		s := m.Initial()
		now := t0 + r.Int63n(int64(time.Hour))
		perToken := 1e9 / lim
		for i := 0; i < 200; i++ {
			switch r.Intn(4) {
			case 0:
			case 1:
				now += r.Int63n(1000)
			default:
				now += int64(r.Float64() * 2 * perToken * float64(1+r.Intn(burst)))
			}
			n := 1 + r.Int63n(int64(burst))
			at := time.Unix(0, now)
			if got, want := m.tokensAt(s, now).Tokens, oracle.TokensAt(at); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("seq %d step %d: tokens %v, x/time/rate %v", seq, i, got, want)
			}
			want := oracle.AllowN(at, int(n))
			var d backend.Decision
			s, d = m.Step(s, now, n)
			if d.Granted != want {
				t.Fatalf("seq %d step %d (Rate %v Burst %d): Step(%d) granted %v, AllowN %v", seq, i, lim, burst, n, d.Granted, want)
			}
			if want {
				grants++
			} else {
				refusals++
			}
		}
	}
	if grants == 0 || refusals == 0 {
		t.Fatalf("%d grants, %d refusals: the sequences test nothing", grants, refusals)
	}
}

// ---- Refund ----

// TestRefundSameInstant: a grant then a Refund at the same instant, given
// the instant the grant was made at (Made: the caller's, or Seen for an
// older one), leaves the bucket exactly as it was, moved to that instant:
// as if the grant had never been made, for grants at older instants too.
// Given the older instant itself instead, the model documents a stricter
// refund: never more tokens than without the grant.
func TestRefundSameInstant(t *testing.T) {
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := mustModel(t, rc.c)
			r := rand.New(rand.NewSource(3))
			s := m.Initial()
			older := 0
			for j, c := range modeltest.Calls(r, t0, 2000, int64(rc.gap), int64(rc.skew), m.burst) {
				next, d := m.Step(s, c.At, c.N)
				if d.Granted && c.N > 0 {
					want := m.tokensAt(s, c.At)
					if got := m.Refund(next, c.At, m.Made(next, c.At), c.N); got != want {
						t.Fatalf("call %d %+v on %+v: Refund(Step) = %+v, want %+v", j, c, s, got, want)
					}
					if m.Made(s, c.At) > c.At { // a grant at an instant older than the bucket's
						older++
						if got := m.Refund(next, c.At, c.At, c.N); got.Tokens > want.Tokens {
							t.Fatalf("call %d %+v on %+v: Refund(Step) given the older instant holds %v tokens, more than without the grant, %v", j, c, s, got.Tokens, want.Tokens)
						}
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

// TestRefundLaterNothingIntervening: a refund later, with no decision in
// between, leaves the bucket deciding as if the grant had never been made:
// what refilled past the burst meanwhile is not given back.
func TestRefundLaterNothingIntervening(t *testing.T) {
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := mustModel(t, rc.c)
			r := rand.New(rand.NewSource(4))
			s := m.Initial()
			for _, c := range modeltest.Calls(r, t0, 2000, int64(rc.gap), 0, m.burst) {
				next, d := m.Step(s, c.At, c.N)
				if d.Granted && c.N > 0 {
					later := c.At + r.Int63n(4*int64(rc.gap)+1)
					refunded := m.Refund(next, later, m.Made(next, c.At), c.N)
					if refunded.Tokens > float64(m.burst) {
						t.Fatalf("refund at +%v fills the bucket past Burst: %v", time.Duration(later-c.At), refunded.Tokens)
					}
					sameDecisions(t, m, refunded, s, later, r)
				}
				s = next
			}
		})
	}
}

// TestRefundAfterRefillGivesNothing: a token taken at t0 is back at t1 (the
// bucket is full again); whatever is granted at t1, refunding the t0 grant
// then must give nothing back: its token already came back with time. The
// Refunder contract: "a refund never lets more through than the limit".
func TestRefundAfterRefillGivesNothing(t *testing.T) {
	m := mustModel(t, Config{Rate: 10, Burst: 3})
	s := run(t, m, m.Initial(), []step{
		{t0, 1, true, 2, 0},
		{t1, 3, true, 0, 0}, // full again at t1: 3 more
	})
	s = m.Refund(s, t1, t0, 1)
	run(t, m, s, []step{
		{t1, 1, false, 0, 100*time.Millisecond - 1}, // 4 in [t0, t1] would be Burst 3 + 1 token
	})
	// Partly: one token taken at t0 from the full bucket, two at t0+50ms.
	// Without the first grant the bucket would have stayed full until
	// t0+50ms, its half token of refill lost, and would hold 1.5 tokens at
	// t1; the refund at t1 must not leave more.
	m = mustModel(t, Config{Rate: 10, Burst: 3})
	s = run(t, m, m.Initial(), []step{
		{t0, 1, true, 2, 0},
		{t0 + int64(d)/2, 2, true, 0, 0},
	})
	s = m.Refund(s, t1, t0, 1)
	// Without the first grant: 3 at t0, 1 at t0+50ms, 1.5 at t1.
	_, got := m.Step(s, t1, 2)
	if got.Granted {
		t.Errorf("after the refund, Step(2) at t1 granted: the bucket without the refunded grant holds 1.5 tokens")
	}
}

// TestRefundNeverExceedsBound: random requests and refunds of earlier
// grants, at the same instant or later, after other decisions; the grants
// not refunded keep within the bound.
func TestRefundNeverExceedsBound(t *testing.T) {
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := mustModel(t, rc.c)
			// A refund in a call's place, at that call's instant: the calls
			// are in order (skew 0), so a grant's effective instant is its
			// own.
			modeltest.CheckRefundsKeepBound(t, simOf(m), int64(rc.gap), 0, true, bound(t, m))
		})
	}
}

// sameDecisions checks that a and b decide alike for every request at a
// few instants from at on. Their Tokens may differ in the last bits (the
// same refill summed from different instants), so they are compared to
// 1e-9 of a token; the decisions are compared exactly, which rounding
// could only break exactly at a token boundary, and the instants are
// random.
func sameDecisions(t *testing.T, m *model, a, b state, at int64, r *rand.Rand) {
	t.Helper()
	for i := 0; i < 5; i++ {
		ta, tb := m.tokensAt(a, at), m.tokensAt(b, at)
		if math.Abs(ta.Tokens-tb.Tokens) > 1e-9*float64(m.burst) {
			t.Fatalf("at %d: refunded bucket holds %v tokens, without the grant %v", at, ta.Tokens, tb.Tokens)
		}
		for n := int64(1); n <= m.burst; n++ {
			_, da := m.Step(a, at, n)
			_, db := m.Step(b, at, n)
			if da.Granted != db.Granted || da.Remaining != db.Remaining {
				t.Fatalf("at %d, %d permits: refunded %+v, without the grant %+v", at, n, da, db)
			}
		}
		at += r.Int63n(m.period + 1)
		if m.period == 0 {
			at += r.Int63n(int64(m.perToken) + 1)
		}
	}
}

// TestCharges: buckets in debt (settlements' charges among the requests)
// keep RetryAfter, When, Reserve and InitialAt exact.
func TestCharges(t *testing.T) {
	for i, rc := range randomConfigs {
		t.Run(fmt.Sprintf("%d/%+v", i, rc.c), func(t *testing.T) {
			m := mustModel(t, rc.c)
			modeltest.CheckCharges(t, simOf(m), int64(rc.gap), int64(rc.skew))
		})
	}
}
