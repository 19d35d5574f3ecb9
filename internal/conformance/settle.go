package conformance

import (
	"context"
	"errors"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// DebtCase is a settlement over a reservation, with the exact figures that
// follow: Reserved permits reserved at the clock's start, Advance later
// settled at Actual (more: a debt), and a request for one permit right
// after refused with RetryAfter.
type DebtCase struct {
	Name       string
	Config     ratelimit.Config
	Reserved   int
	Advance    time.Duration
	Actual     int
	RetryAfter time.Duration
}

// DebtCases returns the debt scenarios: reserve 10 of a limit of 10,
// settle 50, 40 of debt.
func DebtCases() []DebtCase {
	return []DebtCase{
		// 41 tokens at 10/s: 4.1s (1ns earlier the missing tokens are
		// still 1ns of refill away: x/time/rate's rule grants below that).
		{"tokenbucket", tokenbucket.Config{Rate: 10, Burst: 10}, 10, 0, 50, 4100 * ms},
		// 41 tokens, 5 per second: 9 refills.
		{"tokenbucket-interval", tokenbucket.Config{Period: time.Second, PerPeriod: 5, Burst: 10}, 10, 0, 50, 9 * time.Second},
		// 50 counted in the window: refused until it ends.
		{"fixedwindow", fixedwindow.Config{Limit: 10, Window: time.Second}, 10, 300 * ms, 50, 700 * ms},
		// The 40 charged at 300ms in their own segment (250ms): room for
		// one once it leaves the window, at 1250ms.
		{"slidingwindow-segmented", slidingwindow.Config{Limit: 10, Window: time.Second, Segments: 4}, 10, 300 * ms, 50, 950 * ms},
		// 50 in the first window: its weight falls to 9 at 1.82s.
		{"slidingwindow-weighted", slidingwindow.Config{Limit: 10, Window: time.Second}, 10, 0, 50, 1820 * ms},
		// The 40 charged at 300ms in their own entry: 41 must leave, so
		// that entry too, at 1300ms.
		{"slidinglog", slidinglog.Config{Limit: 10, Window: time.Second}, 10, 300 * ms, 50, time.Second},
	}
}

// RunSettle runs the settlement scenarios (control.Reserve, then
// control.Settle) against limiters built by f on a fake clock: exact
// figures of a part given back and of a debt, for every rate algorithm;
// bad settlements that change nothing; a concurrency limit's refusal to
// settle; concurrent settlements of one lease, of which exactly one is
// made.
func RunSettle(t *testing.T, f Factory, opts ...Option) {
	s := newSuite(f, opts)
	for _, a := range Algorithms() {
		a := a
		t.Run(a.Name, func(t *testing.T) {
			if !a.Rate {
				testSettleUnsupported(t, s, a)
				return
			}
			t.Run("GiveBack", func(t *testing.T) { testSettleGiveBack(t, s, a) })
			t.Run("BadCalls", func(t *testing.T) { testSettleBadCalls(t, s, a) })
			t.Run("Concurrent", func(t *testing.T) { testSettleConcurrent(t, s, a) })
			if a.Reserves {
				t.Run("Wait", func(t *testing.T) { testSettleWait(t, s, a) })
			}
		})
	}
	for _, c := range DebtCases() {
		c := c
		t.Run("Debt/"+c.Name, func(t *testing.T) { testSettleDebt(t, s, c) })
	}
}

func mustReserve(t testing.TB, l ratelimit.Limiter, permits int) ratelimit.Lease {
	t.Helper()
	lease, err := control.Reserve(context.Background(), l, permits)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", permits, err)
	}
	return lease
}

func mustSettle(t testing.TB, l ratelimit.Limiter, lease ratelimit.Lease, actual int) {
	t.Helper()
	if err := control.Settle(context.Background(), l, lease, actual); err != nil {
		t.Fatalf("Settle(%d): %v", actual, err)
	}
}

// remaining is what a status check says is left.
func remaining(t testing.TB, l ratelimit.Limiter) int64 {
	t.Helper()
	return mustAcquire(t, l, 0).Remaining()
}

// testSettleGiveBack: reserve 100, settle 30: 70 back, to the permit.
func testSettleGiveBack(t *testing.T, s *suite, a Algorithm) {
	clock := ratelimittest.NewClock()
	l := s.f(t, a.Config(100, ratelimit.Queue{}), clock)
	lease := mustReserve(t, l, 100)
	if !lease.Acquired() || lease.Remaining() != 0 {
		t.Fatalf("Reserve(100) of 100: %v, want granted with 0 remaining", lease)
	}
	mustSettle(t, l, lease, 30)
	if r := remaining(t, l); r != 70 {
		t.Fatalf("after settling 100 reserved at 30: %d remaining, want 70", r)
	}
	if !lease.Settled() {
		t.Errorf("the lease does not say it was settled")
	}
	if g := mustAcquire(t, l, 70); !g.Acquired() || g.Remaining() != 0 {
		t.Fatalf("Acquire(70) after the settlement: %v, want granted with 0 remaining", g)
	}
	if g := mustAcquire(t, l, 1); g.Acquired() {
		t.Fatalf("Acquire(1) with all 100 spent: %v, want refused", g)
	}
	// What came back with time is not given twice: a reservation whose
	// permits all came back, settled at 0, gives nothing more.
	clock.Advance(a.Refill)
	old := mustReserve(t, l, 60)
	clock.Advance(a.Refill)
	if g := mustAcquire(t, l, 100); !g.Acquired() {
		t.Fatalf("Acquire(100) once everything came back: %v", g)
	}
	mustSettle(t, l, old, 0)
	if r := remaining(t, l); r != 0 {
		t.Fatalf("settling at 0 a reservation whose permits came back with time gave back %d", r)
	}
}

// testSettleDebt: a settlement over the reservation charges the excess,
// and a request is refused until the debt is paid, with an exact
// RetryAfter: refused one tick before it, granted at it.
func testSettleDebt(t *testing.T, s *suite, c DebtCase) {
	clock := ratelimittest.NewClock()
	l := s.f(t, c.Config, clock)
	lease := mustReserve(t, l, c.Reserved)
	if !lease.Acquired() {
		t.Fatalf("Reserve(%d): %v", c.Reserved, lease)
	}
	clock.Advance(c.Advance)
	mustSettle(t, l, lease, c.Actual)
	want := s.round(c.RetryAfter, false)
	r := mustAcquire(t, l, 1)
	if r.Acquired() || r.Remaining() != 0 {
		t.Fatalf("Acquire(1) in debt: %v, want refused with 0 remaining", r)
	}
	if d, ok := r.RetryAfter(); !ok || d != want {
		t.Fatalf("Acquire(1) in debt: RetryAfter %v, %v; want %v", d, ok, want)
	}
	clock.Advance(want - s.tick)
	if r := mustAcquire(t, l, 1); r.Acquired() {
		t.Fatalf("Acquire(1) one tick before RetryAfter %v: granted", want)
	} else if d, _ := r.RetryAfter(); d != s.tick {
		t.Fatalf("one tick before RetryAfter: RetryAfter = %v, want %v", d, s.tick)
	}
	clock.Advance(s.tick)
	if r := mustAcquire(t, l, 1); !r.Acquired() {
		t.Fatalf("Acquire(1) at RetryAfter %v: %v", want, r)
	}
}

// snapshot is what a status check says of a limiter, to tell that a call
// changed nothing.
type snapshot struct {
	granted          bool
	remaining        int64
	retry, resetting time.Duration
}

func snap(t testing.TB, l ratelimit.Limiter) snapshot {
	t.Helper()
	lease := mustAcquire(t, l, 0)
	d, _ := lease.RetryAfter()
	return snapshot{lease.Acquired(), lease.Remaining(), d, lease.ResetAfter()}
}

// testSettleBadCalls: settling a refusal, the zero Lease, a grant that was
// not reserved, a lease of another limiter, with a negative cost or a nil
// ctx, or twice, is an error and changes nothing, the lease included.
func testSettleBadCalls(t *testing.T, s *suite, a Algorithm) {
	ctx := context.Background()
	clock := ratelimittest.NewClock()
	l := s.f(t, a.Config(10, ratelimit.Queue{}), clock)
	other := s.f(t, a.Config(10, ratelimit.Queue{}), clock)
	lease := mustReserve(t, l, 4)
	plain := mustAcquire(t, l, 1)
	refused := mustReserve(t, l, 10)
	foreign := mustReserve(t, other, 2)
	if !lease.Acquired() || !plain.Acquired() || refused.Acquired() || !foreign.Acquired() {
		t.Fatalf("setup: %v, %v, %v, %v", lease, plain, refused, foreign)
	}
	clock.Advance(s.round(100*ms, false))
	before := snap(t, l)
	for _, c := range []struct {
		name   string
		ctx    context.Context
		lease  ratelimit.Lease
		actual int
		want   error
	}{
		{"refusal", ctx, refused, 3, ratelimit.ErrInvalidLease},
		{"zero lease", ctx, ratelimit.Lease{}, 3, ratelimit.ErrInvalidLease},
		{"grant not reserved", ctx, plain, 3, ratelimit.ErrInvalidLease},
		{"another limiter's", ctx, foreign, 9, ratelimit.ErrInvalidLease},
		{"negative cost", ctx, lease, -1, ratelimit.ErrInvalidPermits},
		{"nil ctx", nil, lease, 9, ratelimit.ErrNilContext},
	} {
		if err := control.Settle(c.ctx, l, c.lease, c.actual); !errors.Is(err, c.want) {
			t.Errorf("%s: Settle = %v, want %v", c.name, err, c.want)
		}
		if after := snap(t, l); after != before {
			t.Fatalf("%s: the limiter changed: %+v, was %+v", c.name, after, before)
		}
	}
	if lease.Settled() {
		t.Fatalf("a refused settlement marked the lease settled")
	}
	mustSettle(t, l, lease, 0) // the lease was kept: 4 back
	want := before
	want.remaining += 4
	if after := snap(t, l); after.remaining != want.remaining {
		t.Fatalf("after settling 4 reserved at 0: %d remaining, want %d", after.remaining, want.remaining)
	}
	before = snap(t, l)
	if err := control.Settle(ctx, l, lease, 9); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("a second settlement: %v, want ErrInvalidLease", err)
	}
	if after := snap(t, l); after != before {
		t.Fatalf("a second settlement changed the limiter: %+v, was %+v", after, before)
	}
}

// testSettleConcurrent: goroutines settle one lease at once: exactly one
// settlement is made, and the limiter shows it alone.
func testSettleConcurrent(t *testing.T, s *suite, a Algorithm) {
	for trial := 0; trial < 5; trial++ {
		clock := ratelimittest.NewClock()
		l := s.f(t, a.Config(10, ratelimit.Queue{}), clock)
		lease := mustReserve(t, l, 5)
		const workers = 8
		var made atomic.Int64
		var won atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := control.Settle(context.Background(), l, lease, w) // 0..7: gives back or charges
				switch {
				case err == nil:
					made.Add(1)
					won.Store(int64(w))
				case !errors.Is(err, ratelimit.ErrInvalidLease):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if made.Load() != 1 {
			t.Fatalf("trial %d: %d settlements of one lease made, want 1", trial, made.Load())
		}
		if r, want := remaining(t, l), max(0, 10-won.Load()); r != want {
			t.Fatalf("trial %d: settled at %d: %d remaining, want %d", trial, won.Load(), r, want)
		}
	}
}

// testSettleWait: a token bucket's Wait reserves ahead of time; its grant,
// reserved (control.ReserveWait), settles from the instant it was due:
// reserve 2 of an empty bucket of 4 (4 a second, or 1 every 250ms), served
// at 500ms, settled at 5 at 1s: 3 charged to a bucket then holding 2, so
// one token of debt, two to wait for (500ms).
func testSettleWait(t *testing.T, s *suite, a Algorithm) {
	clock := ratelimittest.NewClock()
	l := s.f(t, a.Config(4, ratelimit.Queue{}), clock)
	mustAcquire(t, l, 4)
	type answer struct {
		lease ratelimit.Lease
		err   error
	}
	ch := make(chan answer, 1)
	go func() {
		lease, err := control.ReserveWait(context.Background(), l, 2)
		ch <- answer{lease, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatalf("the Wait did not sleep: %v", err)
	}
	clock.Advance(time.Second)
	w := <-ch
	if w.err != nil || !w.lease.Acquired() {
		t.Fatalf("ReserveWait(2): %v, %v", w.lease, w.err)
	}
	mustSettle(t, l, w.lease, 5)
	r := mustAcquire(t, l, 1)
	if d, ok := r.RetryAfter(); r.Acquired() || !ok || d != s.round(500*ms, false) {
		t.Fatalf("Acquire(1) after the settlement: %v, want refused for 500ms", r)
	}
}

// testSettleUnsupported: a concurrency limit's grant holds its permits
// until Release: there is no cost to settle, and Settle says so.
func testSettleUnsupported(t *testing.T, s *suite, a Algorithm) {
	l := s.f(t, a.Config(2, ratelimit.Queue{}), ratelimittest.NewClock())
	lease := mustReserve(t, l, 2)
	if !lease.Acquired() {
		t.Fatalf("Reserve(2): %v", lease)
	}
	if err := control.Settle(context.Background(), l, lease, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Settle of a concurrency lease = %v, want errors.ErrUnsupported", err)
	}
	if r := remaining(t, l); r != 0 {
		t.Fatalf("the refused settlement gave back permits: %d remaining", r)
	}
	lease.Release()
	if r := remaining(t, l); r != 2 {
		t.Fatalf("after Release of the reservation: %d remaining, want 2", r)
	}
}

// settled is a reservation on the real clock, its lease and its
// settlement (-1 until it is made).
type settled struct {
	realGrant
	lease  ratelimit.Lease
	actual int64
}

// RunSettleRealClock checks that settlements racing decisions on the real
// clock keep each algorithm's bound: workers reserve 1 to 3 permits and
// settle them, at once or after other calls, at 0 to twice as many. The
// work admitted then costs the actual permits, of which the reserved ones
// obey the bound (min(reserved, actual) of each grant, through
// checkSpans) and the rest is the excess charged: the total admitted never
// exceeds the bound plus the charged excess. It counts; it never asserts
// a duration. run is each case's length.
func RunSettleRealClock(t *testing.T, f Factory, run time.Duration) {
	for _, c := range RealClockCases() {
		if c.MaxIn == nil {
			continue
		}
		c := c
		t.Run(c.Name, func(t *testing.T) {
			l := f(t, c.Config, nil)
			all, charged, returned := hammerSettle(t, l, run)
			if len(all) == 0 || charged == 0 || returned == 0 {
				t.Fatalf("%d grants, %d permits charged, %d given back: nothing to check", len(all), charged, returned)
			}
			net := make([]realGrant, len(all))
			for i, g := range all {
				net[i] = g.realGrant
				net[i].permits = min(g.permits, g.actual)
			}
			if err := checkSpans(net, c.MaxIn); err != nil {
				t.Fatalf("%v (%d grants, %d permits charged beyond them)", err, len(all), charged)
			}
		})
	}
}

// hammerSettle runs the workers and returns their settled reservations,
// ordered by before, with the permits charged and given back.
func hammerSettle(t *testing.T, l ratelimit.Limiter, run time.Duration) (all []settled, charged, returned int64) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	ctx := context.Background()
	for w := 0; w < realWorkers/2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			var mine []settled
			var pending []int // indices in mine
			var over, under int64
			settle := func(k int) bool {
				g := &mine[pending[k]]
				n := int(g.permits)
				m := rng.Intn(2*n + 1)
				if err := control.Settle(ctx, l, g.lease, m); err != nil {
					t.Error(err)
					return false
				}
				g.actual = int64(m)
				pending = append(pending[:k], pending[k+1:]...)
				over += int64(max(m-n, 0))
				under += int64(max(n-m, 0))
				return true
			}
			for i := 0; time.Now().Before(stop) && i < 1_000_000; i++ {
				p := 1 + rng.Intn(3)
				before := time.Now()
				lease, err := control.Reserve(ctx, l, p)
				after := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				if lease.Acquired() {
					pending = append(pending, len(mine))
					mine = append(mine, settled{realGrant{before, after, int64(p)}, lease, -1})
				}
				if len(pending) > 0 && (len(pending) > 4 || rng.Intn(2) == 0) {
					if !settle(rng.Intn(len(pending))) {
						return
					}
				}
			}
			for len(pending) > 0 {
				if !settle(0) {
					return
				}
			}
			mu.Lock()
			all = append(all, mine...)
			charged += over
			returned += under
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].before.Before(all[j].before) })
	return all, charged, returned
}
