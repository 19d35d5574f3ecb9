package concurrency

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/engine"
	"github.com/limitkit/ratelimit/internal/modeltest"
)

// Tests of the reference model, in the style of x/time/rate's rate_test.go:
// fixed instants and step tables run through one t.Helper function, then
// properties over random sequences of acquisitions and releases at
// out-of-order and extreme instants, and the extreme limits Validate
// accepts.

var (
	t0 = modeltest.T0
	t1 = t0 + int64(100*time.Millisecond)
)

// op is one request (n permits) or, when release is set, a Release of n,
// and for requests the decision expected.
type op struct {
	at      int64
	n       int64
	release bool
	ok      bool
	rem     int64
}

func run(t *testing.T, m *model, s state, ops []op) state {
	t.Helper()
	for i, o := range ops {
		if o.release {
			s = m.Release(s, o.at, o.n)
			continue
		}
		var got backend.Decision
		s, got = m.Step(s, o.at, o.n)
		if got.Granted != o.ok || got.Remaining != o.rem {
			t.Errorf("op %d: Step(%d) = granted %v remaining %d, want %v %d", i, o.n, got.Granted, got.Remaining, o.ok, o.rem)
		}
		if got.RetryAfter >= 0 {
			t.Errorf("op %d: Step(%d).RetryAfter = %v, want unknown (negative)", i, o.n, got.RetryAfter)
		}
	}
	return s
}

func mustModel(t *testing.T, c Config) *model { t.Helper(); return modeltest.New(t, newModel, c) }

// TestStep: Limit 3; permits come back on Release, not with time; a status
// check wants one permit free and takes nothing.
func TestStep(t *testing.T) {
	m := mustModel(t, Config{Limit: 3})
	s := run(t, m, m.Initial(), []op{
		{at: t0, n: 2, ok: true, rem: 1},
		{at: t1, n: 2, ok: false, rem: 1},
		{at: t0 + int64(time.Hour), n: 2, ok: false, rem: 1}, // time gives nothing back
		{at: t1, n: 0, ok: true, rem: 1},
		{at: t1, n: 1, ok: true, rem: 0},
		{at: t1, n: 0, ok: false, rem: 0},
		{at: t1, n: 2, release: true},
		{at: t0, n: 2, ok: true, rem: 0}, // an older instant changes nothing
	})
	if at := m.InitialAt(s); at != math.MaxInt64 {
		t.Errorf("InitialAt with permits held = %d, want MaxInt64", at)
	}
	s = m.Release(s, t1, 3)
	if at := m.InitialAt(s); at != math.MinInt64 {
		t.Errorf("InitialAt with nothing held = %d, want MinInt64", at)
	}
}

// TestTimeless: random acquisitions and releases; the decisions at random,
// out-of-order and extreme instants equal those at instant 0, never more
// than Limit is held, RetryAfter is always unknown, and InitialAt says
// idle exactly when nothing is held.
func TestTimeless(t *testing.T) {
	instants := []int64{math.MinInt64, -1, 0, 1, t0, math.MaxInt64}
	for _, limit := range []int{1, 2, 7, 1 << 53} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			m := mustModel(t, Config{Limit: limit})
			r := rand.New(rand.NewSource(int64(limit)))
			s, ref := m.Initial(), m.Initial()
			var held []int64 // grants not released yet
			for i := 0; i < 5000; i++ {
				at := instants[r.Intn(len(instants))]
				if r.Intn(2) == 0 {
					at = t0 + r.Int63n(int64(time.Hour)) - int64(time.Minute)
				}
				if len(held) > 0 && r.Intn(3) == 0 {
					k := r.Intn(len(held))
					s = m.Release(s, at, held[k])
					ref = m.Release(ref, 0, held[k])
					held = append(held[:k], held[k+1:]...)
				} else {
					n := r.Int63n(min(m.limit, 4) + 1)
					if r.Intn(10) == 0 {
						n = m.limit
					}
					var d, want backend.Decision
					s, d = m.Step(s, at, n)
					ref, want = m.Step(ref, 0, n)
					if d != want {
						t.Fatalf("step %d: Step(%d) at %d = %+v, at 0 %+v", i, n, at, d, want)
					}
					if d.RetryAfter >= 0 {
						t.Fatalf("step %d: RetryAfter %v, want unknown", i, d.RetryAfter)
					}
					if d.Granted && n > 0 {
						held = append(held, n)
					}
				}
				var sum int64
				for _, h := range held {
					sum += h
				}
				if s.Held != sum || sum > m.limit {
					t.Fatalf("step %d: Held %d, grants not released %d, Limit %d", i, s.Held, sum, m.limit)
				}
				if got := m.Available(s, at); got != m.limit-sum {
					t.Fatalf("step %d: Available %d, want %d", i, got, m.limit-sum)
				}
				switch at := m.InitialAt(s); {
				case sum == 0 && at != math.MinInt64, sum > 0 && at != math.MaxInt64:
					t.Fatalf("step %d: InitialAt %d with %d held", i, at, sum)
				}
			}
		})
	}
}

// TestExtremeConfigs: Limit 1 and 2^53, at extreme instants: every call
// returns at once (a model that loops is a failure, not a hang).
func TestExtremeConfigs(t *testing.T) {
	for _, limit := range []int{1, 1 << 53} {
		for _, at := range []int64{math.MinInt64, 0, t0, math.MaxInt64} {
			t.Run(fmt.Sprintf("%d/%d", limit, at), func(t *testing.T) {
				m := mustModel(t, Config{Limit: limit})
				modeltest.Within(t, 5*time.Second, "the model", func(errorf func(string, ...any)) {
					s := run(t, m, m.Initial(), []op{
						{at: at, n: m.limit, ok: true, rem: 0},
						{at: at, n: 1, ok: false, rem: 0},
						{at: at, n: m.limit, release: true},
						{at: at, n: 0, ok: true, rem: m.limit},
					})
					if ia := m.InitialAt(s); ia != math.MinInt64 {
						errorf("InitialAt after all released = %d", ia)
					}
				})
			})
		}
	}
}

// TestRefund: if the model refunds (its Caps), a grant then a Refund at the same
// instant leaves it as if the grant had never been made.
func TestRefund(t *testing.T) {
	m := mustModel(t, Config{Limit: 3})
	if m.Caps()&engine.Refunds == 0 {
		t.Skip("concurrency's model does not refund (its Caps); its permits come back on Release")
	}
	s, _ := m.Step(m.Initial(), t0, 1)
	next, d := m.Step(s, t1, 2)
	if !d.Granted {
		t.Fatal("2 of 3 refused")
	}
	if got := m.Refund(next, t1, t1, 2); got != s {
		t.Errorf("Refund(Step(s, 2), 2) = %+v, want %+v", got, s)
	}
}
