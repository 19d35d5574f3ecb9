package conformance

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/waittrace"
)

// Limiter is what RunQueue needs beyond ratelimit.Limiter.
type Limiter interface {
	ratelimit.Limiter
	Stats() ratelimit.Stats
	IdleFor() (time.Duration, bool)
	io.Closer
}

// RunQueue runs the Wait, queue and lifecycle scenarios against limiters
// built by f, which must implement Limiter, in the spirit of .NET's shared
// rate limiter test contract.
//
// RunQueue does not sleep to learn that a Wait it started has queued: it
// reads Stats().Queued again whenever the Wait tells its ctx's waittrace
// hooks that it joined the queue, or calls its context's Done method, as a
// Wait does when it is about to block, a timer is set, stopped or run on the clock, or a
// Wait returns, and fails the scenario when none of these shows the Wait
// queued or answered within 5s. Only for
// a Wait(ctx, 0), which Stats does not count, does it give an answer a
// while (20ms) of real time to come: to check that it does not come at
// once on an exhausted limiter, and at each freeing step once a permit is
// available.
func RunQueue(t *testing.T, f Factory, opts ...Option) {
	s := newSuite(f, opts)
	for _, a := range Algorithms() {
		a := a
		t.Run(a.Name, func(t *testing.T) {
			run := func(name string, fn func(t *testing.T, s *suite, a Algorithm)) {
				t.Run(name, func(t *testing.T) { fn(t, s, a) })
			}
			run("WaitGrantsAtOnce", testWaitGrantsAtOnce)
			run("QueuesAndGrabsOldest", testGrabsOldest)
			run("QueuesAndGrabsNewest", testGrabsNewest)
			run("FailsWhenQueueFull", testQueueFull)
			run("ZeroQueue", testZeroQueue)
			run("DropsOldest", testDropsOldest)
			run("BiggerThanQueue", testBiggerThanQueue)
			run("CancelBeforeQueueing", testCancelBefore)
			run("CancelFreesQueueSpace", testCancelFrees)
			if a.Rate {
				run("DeadlineUnreachable", testDeadline)
			}
			run("CloseRefusesQueued", testClose)
			run("Idle", testIdle)
			run("Stats", testStats)
			run("LargeValues", testLarge)
			run("RandomInterleavings", testInterleavings)
		})
	}
}

type env struct {
	t     *testing.T
	a     Algorithm
	clock *ratelimittest.Clock
	l     Limiter
	held  []ratelimit.Lease
	// answered is poked after every answer to a Wait the env started.
	answered chan struct{}
}

func newEnv(t *testing.T, s *suite, a Algorithm, limit int, q ratelimit.Queue) *env {
	clock := ratelimittest.NewClock()
	l, ok := s.f(t, a.Config(limit, q), clock).(Limiter)
	if !ok {
		t.Fatalf("RunQueue: the factory's limiter does not implement conformance.Limiter")
	}
	return &env{t: t, a: a, clock: clock, l: l, answered: make(chan struct{}, 1)}
}

// exhaust takes every available permit, one at a time, keeping the leases.
func (e *env) exhaust() {
	e.t.Helper()
	for {
		lease := mustAcquire(e.t, e.l, 1)
		if !lease.Acquired() {
			return
		}
		e.held = append(e.held, lease)
	}
}

// queuedBelow reports when fewer than n permits are queued: the limiter
// updates its queue before the freeing step that served a waiter returns.
func (e *env) queuedBelow(n int64) func() bool {
	return func() bool { return e.l.Stats().Queued < n }
}

// freeUntil gives permits back in the smallest steps (10ms of time, or one
// released lease) until done reports true.
func (e *env) freeUntil(done func() bool) {
	e.t.Helper()
	for i := 0; i < 1000 && !done(); i++ {
		if e.a.Rate {
			e.clock.Advance(10 * ms)
		} else if len(e.held) > 0 {
			e.held[0].Release()
			e.held = e.held[1:]
		} else {
			e.t.Fatalf("nothing left to release")
		}
	}
}

type result struct {
	lease ratelimit.Lease
	err   error
}

// bound is how long the kit waits for a Wait to queue or be answered
// before it fails the test: it never has to wait that long, since it is
// woken by what the limiter does rather than polling.
const bound = 5 * time.Second

// grace is how long answeredWithin gives an answer to arrive where no
// signal can tell whether one is coming: that a goroutine will not return
// cannot be observed.
const grace = 20 * ms

type pending struct {
	t       *testing.T
	permits int64
	ch      chan result
	r       *result
	// blocked is poked when the Wait joins the queue (it tells its
	// observer so), or, of a limiter that cannot tell, each time it calls
	// its context's Done method, as a Wait does when it is about to block;
	// sawBlocked records that await received such a poke.
	blocked    chan struct{}
	sawBlocked bool
}

// queued pokes p.blocked: p's Wait has joined the queue (its waittrace
// hook Queued).
func (p *pending) queued(context.Context, int) { poke(p.blocked) }

// watchedCtx is the context a Wait started by the kit is given: its own
// but for Done, which pokes done first. A Wait that blocks calls Done for
// the channel it blocks on, after it has queued (memory's does), so the
// poke tells the kit when to look at Stats again.
type watchedCtx struct {
	context.Context
	done chan<- struct{}
}

func (c watchedCtx) Done() <-chan struct{} {
	poke(c.done)
	return c.Context.Done()
}

// poke leaves a token in ch, a channel of capacity 1, unless one is there
// already: whoever receives it looks again at what may have changed since
// it last looked, so no change goes unseen.
func poke(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// start starts Wait(ctx, permits) in a goroutine of its own, on a
// watchedCtx carrying p's waittrace hooks.
func (e *env) start(ctx context.Context, permits int) *pending {
	p := &pending{t: e.t, permits: int64(permits), ch: make(chan result, 1), blocked: make(chan struct{}, 1)}
	ctx = waittrace.WithHooks(ctx, &waittrace.Hooks{Queued: p.queued})
	go func() {
		lease, err := e.l.Wait(watchedCtx{ctx, p.blocked}, permits)
		p.ch <- result{lease, err}
		poke(e.answered)
	}()
	return p
}

// await returns true once cond reports true or p is answered, and false
// after bound. It does not poll: it checks cond again after each event
// that may have changed it (p's Wait calling its context's Done, a change
// of the clock's pending timers, a Wait of the env answered).
func (e *env) await(p *pending, cond func() bool) bool {
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for {
		changed := e.clock.TimersChanged() // before looking, so no change is missed
		if cond() || p.answered() {
			return true
		}
		select {
		case r := <-p.ch:
			p.r = &r
			return true
		case <-p.blocked:
			p.sawBlocked = true
		case <-changed:
		case <-e.answered:
		case <-timeout.C:
			return false
		}
	}
}

// wait starts Wait(ctx, permits) and returns once it is queued (Stats shows
// its permits) or answered.
func (e *env) wait(ctx context.Context, permits int) *pending {
	e.t.Helper()
	return e.waitQueued(ctx, permits, e.l.Stats().Queued+int64(permits))
}

// waitQueued starts Wait(ctx, permits) and returns once Stats shows queued
// permits in all, or the Wait is answered.
func (e *env) waitQueued(ctx context.Context, permits int, queued int64) *pending {
	e.t.Helper()
	p := e.start(ctx, permits)
	var q int64
	if !e.await(p, func() bool { q = e.l.Stats().Queued; return q == queued }) {
		e.t.Fatalf("Wait(%d) neither queued nor answered within %v: Stats().Queued = %d, want %d "+
			"(RunQueue looks at Stats again when the Wait says it queued (or calls its context's Done method), "+
			"a timer is set, stopped or run on the clock, or a Wait returns)", permits, bound, q, queued)
	}
	return p
}

// waitBlocked starts Wait(ctx, permits) and returns once it is answered or
// has joined the queue (or called its context's Done method to block on
// it). It is for a Wait that Stats does not show queued: Wait(ctx, 0).
func (e *env) waitBlocked(ctx context.Context, permits int) *pending {
	e.t.Helper()
	p := e.start(ctx, permits)
	if !e.await(p, func() bool { return p.sawBlocked }) {
		e.t.Fatalf("Wait(%d) neither answered nor queued within %v", permits, bound)
	}
	return p
}

// firstAnswer returns once one of ps is answered.
func (e *env) firstAnswer(ps ...*pending) {
	e.t.Helper()
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for {
		for _, p := range ps {
			if p.answered() {
				return
			}
		}
		select {
		case <-e.answered:
		case <-timeout.C:
			e.t.Fatalf("none of %d waiters answered within %v", len(ps), bound)
		}
	}
}

// settled returns once every answer the limiter has given to ps (waiters
// of at least one permit each, queued or answered) has arrived: Stats
// counts the permits of the waiters still queued, so while it shows fewer
// than those of the waiters not answered yet, an answer is on its way.
func (e *env) settled(ps []*pending) {
	e.t.Helper()
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for {
		var waiting int64
		for _, p := range ps {
			if !p.answered() {
				waiting += p.permits
			}
		}
		q := e.l.Stats().Queued
		if q >= waiting {
			return
		}
		select {
		case <-e.answered:
		case <-timeout.C:
			e.t.Fatalf("Stats().Queued = %d for %d permits of waiters not answered within %v", q, waiting, bound)
		}
	}
}

// answeredWithin reports whether p is answered within d of real time,
// returning as soon as it is.
func (p *pending) answeredWithin(d time.Duration) bool {
	if p.answered() {
		return true
	}
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	select {
	case r := <-p.ch:
		p.r = &r
		return true
	case <-timeout.C:
		return false
	}
}

func (p *pending) answered() bool {
	if p.r != nil {
		return true
	}
	select {
	case r := <-p.ch:
		p.r = &r
		return true
	default:
		return false
	}
}

// result waits for the answer (bound at most).
func (p *pending) result() (ratelimit.Lease, error) {
	p.t.Helper()
	if p.r == nil {
		timeout := time.NewTimer(bound)
		defer timeout.Stop()
		select {
		case r := <-p.ch:
			p.r = &r
		case <-timeout.C:
			p.t.Fatalf("no answer from Wait within %v", bound)
		}
	}
	return p.r.lease, p.r.err
}

func (p *pending) wantGranted() ratelimit.Lease {
	p.t.Helper()
	lease, err := p.result()
	if err != nil || !lease.Acquired() {
		p.t.Fatalf("Wait: %v, %v; want granted", lease, err)
	}
	return lease
}

func (p *pending) wantRefused(r ratelimit.Reason) ratelimit.Lease {
	p.t.Helper()
	lease, err := p.result()
	if err != nil || lease.Acquired() || lease.Reason() != r {
		p.t.Fatalf("Wait: %v, %v; want refused with reason %v", lease, err, r)
	}
	return lease
}

func (e *env) wantQueued(n int64) {
	e.t.Helper()
	if q := e.l.Stats().Queued; q != n {
		e.t.Fatalf("Stats().Queued = %d, want %d", q, n)
	}
}

// wantRetryAfter checks that a rate algorithm's refusal says when to retry.
func (e *env) wantRetryAfter(lease ratelimit.Lease) {
	e.t.Helper()
	if d, ok := lease.RetryAfter(); e.a.Rate && (!ok || d <= 0) {
		e.t.Fatalf("refusal %v: RetryAfter = %v, %v; want a positive duration", lease, d, ok)
	}
}
