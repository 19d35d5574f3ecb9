package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func newMem(t *testing.T, cfg ratelimit.Config, clock *ratelimittest.Clock) memory.Limiter {
	t.Helper()
	l, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var bg = context.Background()

func TestChainAllOrNothing(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, concurrency.Config{Limit: 2}, clock)
	b := newMem(t, concurrency.Config{Limit: 1}, clock)
	c := ratelimit.Chain(a, b)
	first, err := c.Acquire(bg, 1)
	if err != nil || !first.Acquired() || first.Remaining() != 0 || first.Limit() != 1 {
		t.Fatalf("first Acquire: %v, %v; want granted with b's figures (0 of 1 left)", first, err)
	}
	second, err := c.Acquire(bg, 1)
	if err != nil || second.Acquired() || second.Reason() != ratelimit.ReasonLimit || second.Limit() != 1 {
		t.Fatalf("second Acquire: %v, %v; want b's refusal", second, err)
	}
	if got := a.Stats().Available; got != 1 {
		t.Fatalf("a has %d available after the chain's refusal, want 1 (its permit given back)", got)
	}
	first.Release()
	first.Release()
	if a.Stats().Available != 2 || b.Stats().Available != 1 {
		t.Fatalf("after Release: a %+v, b %+v; want both full", a.Stats(), b.Stats())
	}
	if _, err := c.Acquire(bg, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Acquire(3): %v, want ErrExceedsLimit from a", err)
	}
	if _, err := ratelimit.Chain().Acquire(bg, 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("empty chain: %v, want ErrInvalidConfig", err)
	}
}

// TestChainWaitHoldsNothingWhileSleeping: while the chain sleeps on the rate
// limiter, the concurrency limiter's permit is not held.
func TestChainWaitHoldsNothingWhileSleeping(t *testing.T) {
	clock := ratelimittest.NewClock()
	conc := newMem(t, concurrency.Config{Limit: 1}, clock)
	win := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Second}, clock)
	if l, _ := win.Acquire(bg, 1); !l.Acquired() {
		t.Fatal("setup: window not granted")
	}
	c := ratelimit.Chain(conc, win)
	done := make(chan ratelimit.Lease, 1)
	go func() {
		l, err := c.Wait(bg, 1)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	waitTimers(t, clock, 1) // the chain is asleep on the clock
	if got := conc.Stats().Available; got != 1 {
		t.Fatalf("concurrency permit held while sleeping: %d available, want 1", got)
	}
	clock.Advance(time.Second)
	lease := <-done
	if !lease.Acquired() || conc.Stats().Available != 0 || win.Stats().Available != 0 {
		t.Fatalf("after the window: %v, conc %+v, win %+v; want granted by both", lease, conc.Stats(), win.Stats())
	}
	lease.Release()
	if conc.Stats().Available != 1 {
		t.Fatalf("Release did not give the concurrency permit back")
	}
}

func TestChainWaitDeadlineAndConcurrency(t *testing.T) {
	clock := ratelimittest.NewClock()
	win := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Second}, clock)
	win.Acquire(bg, 1)
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Millisecond))
	defer cancel()
	lease, err := ratelimit.Chain(win).Wait(ctx, 1)
	if err != nil || lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with a 1ms deadline: %v, %v; want a ReasonDeadline refusal", lease, err)
	}
	if d, ok := lease.RetryAfter(); !ok || d != time.Second {
		t.Fatalf("RetryAfter = %v, %v; want 1s", d, ok)
	}

	conc := newMem(t, concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, clock)
	held, _ := conc.Acquire(bg, 1)
	done := make(chan ratelimit.Lease, 1)
	go func() {
		l, _ := ratelimit.Chain(conc).Wait(bg, 1)
		done <- l
	}()
	for conc.Stats().Queued == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	held.Release()
	if l := <-done; !l.Acquired() {
		t.Fatalf("chain Wait on a concurrency limiter: %v, want granted after Release", l)
	}
}

// probe is a limiter of the tests' own: it grants (capacity 10), or refuses,
// or fails, and counts the calls it gets. It refunds.
type probe struct {
	mu        sync.Mutex
	refuse    bool
	err       error // returned by Acquire and Wait
	refundErr error // returned by Refund
	calls     int   // Acquire and Wait calls
	refunded  int   // permits refunded
	refundCtx error // ctx.Err() seen by the last Refund
}

func (p *probe) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.err != nil {
		return ratelimit.Lease{}, p.err
	}
	o := &ratelimit.Outcome{Limit: 10, Reason: ratelimit.ReasonLimit}
	if !p.refuse {
		o.Reason = ratelimit.ReasonNone
	}
	return o.Lease(5, time.Second, 0, 0), nil
}

func (p *probe) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return p.Acquire(ctx, permits)
}

func (p *probe) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refundCtx = ctx.Err()
	if lease.Acquired() {
		p.refunded += permits
	}
	return p.refundErr
}

func (p *probe) stats() (calls, refunded int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, p.refunded
}

// plain hides every method of its limiter but Acquire and Wait: a member
// that cannot refund.
type plain struct{ ratelimit.Limiter }

// TestChainRefusalSpendsNothing: a refusal by a later limiter gives back
// what the earlier ones granted, so three refused attempts leave the
// organisation's budget whole; a concurrency member that cannot refund
// gets its permits back by Release.
func TestChainRefusalSpendsNothing(t *testing.T) {
	clock := ratelimittest.NewClock()
	org := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	held := newMem(t, concurrency.Config{Limit: 5}, clock)
	user := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)
	c := ratelimit.Chain(org, plain{held}, user)
	if l, err := c.Acquire(bg, 1); err != nil || !l.Acquired() {
		t.Fatalf("first Acquire: %v, %v", l, err)
	}
	for i := 0; i < 3; i++ {
		l, err := c.Acquire(bg, 1)
		if err != nil || l.Acquired() || l.Limit() != 1 {
			t.Fatalf("refused attempt %d: %v, %v; want user's refusal", i, l, err)
		}
	}
	if got := org.Stats().Available; got != 9 {
		t.Fatalf("org has %d available after 1 grant and 3 refused attempts, want 9", got)
	}
	if got := held.Stats().Available; got != 4 {
		t.Fatalf("held has %d available, want 4 (one held by the grant, the refused attempts' released)", got)
	}
	// Wait refused for a deadline it cannot meet gives back too.
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Minute))
	defer cancel()
	if l, err := c.Wait(ctx, 1); err != nil || l.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait: %v, %v; want refused (ReasonDeadline)", l, err)
	}
	if got := org.Stats().Available; got != 9 {
		t.Fatalf("org has %d available after a refused Wait, want 9", got)
	}
}

// TestChainExceedsLaterCapacityTakesNothing: permits over a later member's
// capacity are an invalid call, which changes no member's state.
func TestChainExceedsLaterCapacityTakesNothing(t *testing.T) {
	clock := ratelimittest.NewClock()
	org := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	user := newMem(t, fixedwindow.Config{Limit: 2, Window: time.Hour}, clock)
	c := ratelimit.Chain(org, user)
	if _, err := c.Acquire(bg, 5); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Acquire(5): %v, want ErrExceedsLimit from user", err)
	}
	if _, err := c.Wait(bg, 5); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Wait(5): %v, want ErrExceedsLimit from user", err)
	}
	if got := org.Stats(); got.Available != 10 || got.Granted != 0 || got.Refused != 0 {
		t.Fatalf("org after two invalid calls: %+v, want 10 available and no request counted", got)
	}
	// A member that cannot tell its capacity (no CheckPermits) is
	// asked once org has granted: org's grant is given back, and counted
	// out.
	c = ratelimit.Chain(org, plain{user})
	if _, err := c.Acquire(bg, 5); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Acquire(5) with user hidden: %v, want ErrExceedsLimit from user", err)
	}
	if got := org.Stats(); got.Available != 10 || got.Granted != 0 {
		t.Fatalf("org after a grant given back: %+v, want 10 available and no grant counted", got)
	}
}

// TestChainWaitCountsOneGrant: a Wait that sleeps once, on the second
// member, and then succeeds is one grant of the first member: the grant it
// gave back before sleeping counts for nothing.
func TestChainWaitCountsOneGrant(t *testing.T) {
	clock := ratelimittest.NewClock()
	f1 := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	f2 := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Second}, clock)
	if l, _ := f2.Acquire(bg, 1); !l.Acquired() {
		t.Fatal("setup: f2 not granted")
	}
	c := ratelimit.Chain(f1, f2)
	done := make(chan error, 1)
	go func() {
		l, err := c.Wait(bg, 1)
		if err == nil && !l.Acquired() {
			err = errors.New(l.String())
		}
		done <- err
	}()
	waitTimers(t, clock, 1) // asleep until f2's window ends
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f1.Stats(); got.Granted != 1 || got.Available != 9 {
		t.Fatalf("f1 after one Wait: %+v, want 1 grant, 9 available", got)
	}
}

// TestChainCopiesLimiters: changing the caller's slice afterwards does not
// change the chain.
func TestChainCopiesLimiters(t *testing.T) {
	clock := ratelimittest.NewClock()
	a := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	b := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	ls := []ratelimit.Limiter{a}
	c := ratelimit.Chain(ls...)
	ls[0] = b
	if l, err := c.Acquire(bg, 3); err != nil || !l.Acquired() {
		t.Fatalf("Acquire: %v, %v", l, err)
	}
	if a.Stats().Available != 7 || b.Stats().Available != 10 {
		t.Fatalf("a %+v, b %+v; want the permits taken from a, the chain's member", a.Stats(), b.Stats())
	}
}

// TestChainNests: a chain refunds, so a chain inside a chain gives
// back what its members granted when a later member refuses; Refund of a
// chain's grant gives back every member's permits, once.
func TestChainNests(t *testing.T) {
	clock := ratelimittest.NewClock()
	org := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	team := newMem(t, fixedwindow.Config{Limit: 10, Window: time.Hour}, clock)
	user := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)
	inner := ratelimit.Chain(org, team)
	c := ratelimit.Chain(inner, user)
	if l, _ := c.Acquire(bg, 1); !l.Acquired() {
		t.Fatal("first Acquire refused")
	}
	for i := 0; i < 3; i++ {
		if l, err := c.Acquire(bg, 1); err != nil || l.Acquired() {
			t.Fatalf("attempt %d: %v, %v; want refused by user", i, l, err)
		}
	}
	if org.Stats().Available != 9 || team.Stats().Available != 9 {
		t.Fatalf("org %+v, team %+v; want 9 each (only the grant spent)", org.Stats(), team.Stats())
	}

	r, ok := any(inner).(interface {
		Refund(context.Context, ratelimit.Lease, int) error
	})
	if !ok {
		t.Fatal("a chain does not refund")
	}
	g, err := inner.Acquire(bg, 4)
	if err != nil || !g.Acquired() {
		t.Fatalf("inner Acquire(4): %v, %v", g, err)
	}
	if err := r.Refund(bg, g, 4); err != nil {
		t.Fatal(err)
	}
	if err := r.Refund(bg, g, 4); err != nil { // once only
		t.Fatal(err)
	}
	if org.Stats().Available != 9 || team.Stats().Available != 9 {
		t.Fatalf("after Refund (twice): org %+v, team %+v; want 9 each", org.Stats(), team.Stats())
	}
	// Another chain's grant, a refusal and a member's own lease are not this chain's.
	other, _ := ratelimit.Chain(org).Acquire(bg, 1)
	refused, _ := c.Acquire(bg, 1)
	own, _ := org.Acquire(bg, 1)
	for _, l := range []ratelimit.Lease{other, refused, own} {
		if err := r.Refund(bg, l, 1); err != nil {
			t.Fatal(err)
		}
	}
	if org.Stats().Available != 7 {
		t.Fatalf("org %+v; want 7: refunding leases that are not the chain's grants does nothing", org.Stats())
	}
	//lint:ignore SA1012 a nil context is the input under test
	if err := r.Refund(nil, g, 1); !errors.Is(err, ratelimit.ErrNilContext) {
		t.Fatalf("Refund(nil ctx): %v", err)
	}
	if err := r.Refund(bg, g, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatalf("Refund(-1): %v", err)
	}
}

// TestChainGiveBackErrors: a member's refund error reaches the caller,
// joined to the refusal; a member's error is returned after the earlier
// members are refunded, with a ctx that has not ended even when the
// caller's has.
func TestChainGiveBackErrors(t *testing.T) {
	boom := errors.New("boom")
	first := &probe{refundErr: boom}
	c := ratelimit.Chain(first, &probe{refuse: true})
	l, err := c.Acquire(bg, 2)
	if !errors.Is(err, boom) || l.Acquired() || l.Reason() != ratelimit.ReasonLimit {
		t.Fatalf("refund failing: %v, %v; want the refusal and the refund's error", l, err)
	}

	ctx, cancel := context.WithCancel(bg)
	first = &probe{}
	failing := &probe{err: context.Canceled}
	c = ratelimit.Chain(first, failing)
	cancelling := ratelimit.Chain(first, limiterFunc(func(ctx context.Context, permits int) (ratelimit.Lease, error) {
		cancel()
		return ratelimit.Lease{}, ctx.Err()
	}))
	if _, err := c.Acquire(bg, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("failing member: %v", err)
	}
	if _, err := cancelling.Acquire(ctx, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("member that sees ctx end: %v, want context.Canceled", err)
	}
	if _, refunded := first.stats(); refunded != 6 || first.refundCtx != nil {
		t.Fatalf("first refunded %d permits, ctx error at refund %v; want 6 (3 twice), with a live ctx", refunded, first.refundCtx)
	}
}

// limiterFunc is a limiter whose Acquire and Wait are f.
type limiterFunc func(context.Context, int) (ratelimit.Lease, error)

func (f limiterFunc) Acquire(ctx context.Context, p int) (ratelimit.Lease, error) { return f(ctx, p) }
func (f limiterFunc) Wait(ctx context.Context, p int) (ratelimit.Lease, error)    { return f(ctx, p) }

// checkBadContexts checks that l's Acquire and Wait report a nil ctx
// (ErrNilContext) and a done one (context.Canceled).
func checkBadContexts(t *testing.T, l ratelimit.Limiter) {
	t.Helper()
	done, cancel := context.WithCancel(bg)
	cancel()
	for _, call := range []struct {
		name string
		f    func(context.Context, int) (ratelimit.Lease, error)
	}{{"Acquire", l.Acquire}, {"Wait", l.Wait}} {
		if _, err := call.f(nil, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck // a nil ctx on purpose
			t.Errorf("%s(nil ctx): %v, want ErrNilContext", call.name, err)
		}
		if _, err := call.f(done, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("%s(done ctx): %v, want context.Canceled", call.name, err)
		}
	}
}

// TestChainInvalidCalls: a nil or done ctx, negative permits, an empty
// chain and a nil member are reported before any member is asked.
func TestChainInvalidCalls(t *testing.T) {
	p := &probe{}
	c := ratelimit.Chain(p, &probe{})
	checkBadContexts(t, c)
	for _, call := range []struct {
		name string
		f    func(c ratelimit.Limiter) func(context.Context, int) (ratelimit.Lease, error)
	}{
		{"Acquire", func(c ratelimit.Limiter) func(context.Context, int) (ratelimit.Lease, error) { return c.Acquire }},
		{"Wait", func(c ratelimit.Limiter) func(context.Context, int) (ratelimit.Lease, error) { return c.Wait }},
	} {
		if _, err := call.f(c)(bg, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
			t.Errorf("%s(-1): %v, want ErrInvalidPermits", call.name, err)
		}
		for _, bad := range []ratelimit.Limiter{ratelimit.Chain(), ratelimit.Chain(p, nil)} {
			if _, err := call.f(bad)(bg, 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
				t.Errorf("%s on an empty chain or one with a nil member: %v, want ErrInvalidConfig", call.name, err)
			}
		}
	}
	if calls, _ := p.stats(); calls != 0 {
		t.Fatalf("the first member was asked %d times, want never", calls)
	}
}

// TestChainWaitStatus: Wait(ctx, 0) waits until every member has a permit,
// and takes nothing; over FromRate, it sleeps until the token is there
// instead of asking again and again.
func TestChainWaitStatus(t *testing.T) {
	clock := ratelimittest.NewClock()
	conc := newMem(t, concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, clock)
	win := newMem(t, fixedwindow.Config{Limit: 2, Window: time.Second}, clock)
	held, _ := conc.Acquire(bg, 1)
	win.Acquire(bg, 2)
	done := make(chan ratelimit.Lease, 1)
	go func() {
		l, err := ratelimit.Chain(win, conc).Wait(bg, 0)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	waitTimers(t, clock, 1) // asleep on win's window
	clock.Advance(time.Second)
	select { // a status check queues no permits: give the chain time to reach conc
	case l := <-done:
		t.Fatalf("answered %v while conc has no permit", l)
	case <-time.After(20 * time.Millisecond):
	}
	held.Release()
	select {
	case l := <-done:
		if !l.Acquired() || win.Stats().Available != 2 || conc.Stats().Available != 1 {
			t.Fatalf("%v, win %+v, conc %+v; want granted, nothing taken", l, win.Stats(), conc.Stats())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer 5s after conc's permit came back")
	}

	var asked atomic.Int32
	x := ratelimit.FromRate(rate.NewLimiter(20, 1))
	x.Acquire(bg, 1)
	counted := limiterFunc(func(ctx context.Context, p int) (ratelimit.Lease, error) {
		asked.Add(1)
		return x.Acquire(ctx, p)
	})
	if l, err := ratelimit.Chain(counted).Wait(bg, 0); err != nil || !l.Acquired() {
		t.Fatalf("Wait(0) over FromRate: %v, %v", l, err)
	}
	if n := asked.Load(); n > 3 {
		t.Fatalf("the member was asked %d times in about 50ms, want it to sleep until its RetryAfter", n)
	}
}

// TestChainIdleFor: a chain is idle when every member is, for the shortest
// of their idle times; a busy member, or one that cannot tell, makes it busy.
func TestChainIdleFor(t *testing.T) {
	clock := ratelimittest.NewClock()
	a, _ := memory.New(fixedwindow.Config{Limit: 2, Window: time.Second}, memory.WithClock(clock))
	clock.Advance(time.Minute)
	b, _ := memory.New(fixedwindow.Config{Limit: 2, Window: time.Second}, memory.WithClock(clock))
	clock.Advance(time.Second)
	defer a.Close()
	defer b.Close()
	chain := ratelimit.Chain(a, b)
	if d, ok := idleFor(chain); !ok || d != time.Second {
		t.Fatalf("fresh members idle for 61s and 1s: IdleFor = %v, %v; want 1s, true", d, ok)
	}
	if lease, err := chain.Acquire(context.Background(), 1); err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	if _, ok := idleFor(chain); ok {
		t.Fatal("idle with a permit counted in both windows")
	}
	clock.Advance(2 * time.Second)
	if _, ok := idleFor(chain); !ok {
		t.Fatal("not idle once both windows are over")
	}
	if _, ok := idleFor(ratelimit.Chain(a, struct{ ratelimit.Limiter }{b})); ok {
		t.Fatal("idle with a member that cannot report idleness")
	}
	if _, ok := idleFor(ratelimit.Chain()); ok {
		t.Fatal("an empty (invalid) chain reports idle")
	}
}

// waitTimers returns once n timers are pending on clock: n goroutines
// asleep on it, say. It fails t after 5s.
func waitTimers(t testing.TB, clock *ratelimittest.Clock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clock.WaitForTimers(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// idleFor is l's IdleFor, which every chain has.
func idleFor(l ratelimit.Limiter) (time.Duration, bool) {
	return l.(interface{ IdleFor() (time.Duration, bool) }).IdleFor()
}

// A chain's Wait refuses at once when a member after the refusing one has
// no permit before ctx's deadline, as a limiter's own Wait does: it does
// not wait on the first (a token bucket whose next token comes in 100ms)
// to find the second (a sliding log full for an hour) refusing. The
// clock, near the present as the deadlines are real, does not move
// meanwhile: a Wait on the bucket would last until the deadline.
func TestChainWaitRefusesAtOnceForALaterMember(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Now())
	bucket := newMem(t, tokenbucket.Config{Rate: 10, Burst: 1}, clock)
	window := newMem(t, slidinglog.Config{Limit: 1, Window: time.Hour}, clock)
	bucket.Acquire(bg, 1)
	window.Acquire(bg, 1)
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	lease, err := ratelimit.Chain(bucket, window).Wait(ctx, 1)
	if err != nil || lease.Acquired() || lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait: %v, %v; want a ReasonDeadline refusal at once", lease, err)
	}
	refused, _ := window.Acquire(bg, 1) // a refusal changes nothing
	want, _ := refused.RetryAfter()
	if d, ok := lease.RetryAfter(); !ok || d != want || want != time.Hour || lease.Limit() != 1 {
		t.Fatalf("RetryAfter = %v, %v, Limit %d; want the window's: %v, 1", d, ok, lease.Limit(), want)
	}
	if bucket.Stats().Queued != 0 || bucket.Stats().Available != 0 || window.Stats().Available != 0 {
		t.Fatalf("after the refusal: bucket %+v, window %+v; want nothing queued or taken", bucket.Stats(), window.Stats())
	}
	// With time enough, the chain still waits: under a 3-hour deadline it
	// waits on the bucket, then on the log, until its hour ends.
	ctx, cancel = context.WithTimeout(bg, 3*time.Hour)
	defer cancel()
	done := make(chan ratelimit.Lease, 1)
	go func() {
		l, _ := ratelimit.Chain(bucket, window).Wait(ctx, 1)
		done <- l
	}()
	for bucket.Stats().Queued == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	clock.Advance(100 * time.Millisecond)
	for window.Stats().Queued == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	clock.Advance(time.Hour)
	if l := <-done; !l.Acquired() {
		t.Fatalf("Wait with time enough: %v, want granted", l)
	}
}

// unavailable refuses every request for want of its backend
// (ReasonUnavailable), as a Redis limiter under FailClosed does.
type unavailable struct{}

func (unavailable) Acquire(context.Context, int) (ratelimit.Lease, error) {
	o := &ratelimit.Outcome{Limit: 5, Reason: ratelimit.ReasonUnavailable}
	return o.Lease(0, -1, 0, 0), nil
}

func (u unavailable) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return u.Acquire(ctx, permits)
}

// A member's refusal for another reason than its limit is the chain's
// answer, whatever the later members hold: a backend down is not a
// deadline that comes too soon.
func TestChainWaitKeepsAnUnavailableRefusal(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Now())
	window := newMem(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)
	window.Acquire(bg, 1)
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	lease, err := ratelimit.Chain(unavailable{}, window).Wait(ctx, 1)
	if err != nil || lease.Reason() != ratelimit.ReasonUnavailable {
		t.Fatalf("Wait: %v (%v), %v; want the first member's ReasonUnavailable refusal", lease, lease.Reason(), err)
	}
}
