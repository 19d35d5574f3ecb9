package conformance

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

// The scenarios of RunQueue, each on the env of queue.go.

var bg = context.Background()

func testWaitGrantsAtOnce(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{})
	lease, err := e.l.Wait(bg, 3)
	if err != nil || !lease.Acquired() || lease.Remaining() != 0 {
		t.Fatalf("Wait(3) on a fresh limiter: %v, %v; want granted with 0 remaining", lease, err)
	}
	e.held = append(e.held, lease)
	// Wait(ctx, 0) waits, without a queue, until a permit is available,
	// and takes nothing.
	p := e.waitBlocked(bg, 0)
	if p.answeredWithin(grace) {
		t.Fatalf("Wait(0) on an exhausted limiter answered at once: %v; want it to wait", p.r.lease)
	}
	// Stats does not count a Wait(0) as queued: its answer is looked for
	// once the permit it waits for is available.
	e.freeUntil(func() bool { return e.l.Stats().Available >= 1 && p.answeredWithin(grace) })
	p.wantGranted()
	if g := mustAcquire(t, e.l, 1); !g.Acquired() {
		t.Fatalf("Acquire(1) after Wait(0): %v, want granted (Wait(0) takes nothing)", g)
	}
}

// queueOrder queues A(2) then B(2) on an exhausted limit of 3, frees permits
// step by step until one is served, and reports which.
func queueOrder(t *testing.T, s *suite, a Algorithm, order ratelimit.QueueOrder) string {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 4, Order: order})
	e.exhaust()
	pa := e.wait(bg, 2)
	pb := e.wait(bg, 2)
	e.wantQueued(4)
	e.freeUntil(e.queuedBelow(4))
	e.wantQueued(2) // one served, the other still waits
	e.firstAnswer(pa, pb)
	switch {
	case pa.answered() && !pb.answered():
		pa.wantGranted()
		return "A"
	case pb.answered() && !pa.answered():
		pb.wantGranted()
		return "B"
	}
	t.Fatalf("want exactly one of A and B answered: A %v, B %v", pa.answered(), pb.answered())
	return ""
}

func testGrabsOldest(t *testing.T, s *suite, a Algorithm) {
	if first := queueOrder(t, s, a, ratelimit.OldestFirst); first != "A" {
		t.Fatalf("OldestFirst served %s first, want A (the oldest)", first)
	}
}

func testGrabsNewest(t *testing.T, s *suite, a Algorithm) {
	want := "B"
	if a.Reserves {
		want = "A" // reservations are served in arrival order
	}
	if first := queueOrder(t, s, a, ratelimit.NewestFirst); first != want {
		t.Fatalf("NewestFirst served %s first, want %s", first, want)
	}
}

func testQueueFull(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 2})
	e.exhaust()
	pa := e.wait(bg, 2)
	e.wantQueued(2)
	lease := e.wait(bg, 1).wantRefused(ratelimit.ReasonQueueFull)
	e.wantRetryAfter(lease)
	e.wantQueued(2)
	if pa.answered() {
		t.Fatalf("the queued waiter was answered by another's refusal")
	}
}

// testZeroQueue: the zero Queue has no bound: a Wait on an exhausted
// limiter waits its turn, and is served once permits come back.
func testZeroQueue(t *testing.T, s *suite, a Algorithm) {
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		e := newEnv(t, s, a, 3, ratelimit.Queue{Order: order})
		e.exhaust()
		p := e.wait(bg, 3)
		e.wantQueued(3)
		e.freeUntil(e.queuedBelow(3))
		p.wantGranted()
		e.wantQueued(0)
	}
}

func testDropsOldest(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 3, Order: ratelimit.NewestFirst})
	e.exhaust()
	pa, pb, pc := e.wait(bg, 1), e.wait(bg, 1), e.wait(bg, 1)
	e.wantQueued(3)
	pd := e.waitQueued(bg, 2, 3) // A and B must go, together
	pa.wantRefused(ratelimit.ReasonEvicted)
	pb.wantRefused(ratelimit.ReasonEvicted)
	if pc.answered() || pd.answered() {
		t.Fatalf("C or D answered; both should still wait")
	}
	e.wantQueued(3)
	e.freeUntil(e.queuedBelow(1))
	pc.wantGranted()
	pd.wantGranted()
}

func testBiggerThanQueue(t *testing.T, s *suite, a Algorithm) {
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 1, Order: order})
		e.exhaust()
		pa := e.wait(bg, 1)
		e.wait(bg, 2).wantRefused(ratelimit.ReasonQueueFull)
		if pa.answered() {
			t.Fatalf("%v: a request bigger than the queue evicted a waiter", order)
		}
		e.wantQueued(1)
	}
}

func testCancelBefore(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 3})
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := e.l.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx: %v, want context.Canceled", err)
	}
	if s := e.l.Stats(); s.Available != 3 || s.Queued != 0 {
		t.Fatalf("a cancelled Wait changed the state: %+v", s)
	}
}

func testCancelFrees(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 2})
	e.exhaust()
	before := e.l.Stats()
	ctx, cancel := context.WithCancel(bg)
	pa := e.wait(ctx, 2)
	e.wantQueued(2)
	cancel()
	if _, err := pa.result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	after := e.l.Stats()
	if after.Queued != 0 || after.Available != before.Available {
		t.Fatalf("after cancel: %+v, want nothing queued and the permits given back (%+v)", after, before)
	}
	pb := e.wait(bg, 2) // the space is free again
	e.wantQueued(2)
	e.freeUntil(e.queuedBelow(1))
	pb.wantGranted()
}

func testDeadline(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 3})
	e.exhaust()
	ctx, cancel := context.WithDeadline(bg, e.clock.Now().Add(ms))
	defer cancel()
	lease := e.wait(ctx, 1).wantRefused(ratelimit.ReasonDeadline)
	if d, ok := lease.RetryAfter(); !ok || d <= ms {
		t.Fatalf("deadline refusal: RetryAfter = %v, %v; want more than the 1ms deadline", d, ok)
	}
	e.wantQueued(0)
	if s := e.l.Stats(); s.Available != 0 {
		t.Fatalf("deadline refusal changed the state: %+v", s)
	}
	// A deadline far enough is accepted, and the waiter is served by then.
	ctx2, cancel2 := context.WithDeadline(bg, e.clock.Now().Add(a.Refill))
	defer cancel2()
	p := e.wait(ctx2, 1)
	e.wantQueued(1)
	e.freeUntil(e.queuedBelow(1))
	p.wantGranted()
}

func testClose(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 2})
	e.exhaust()
	pa := e.wait(bg, 1)
	e.wantQueued(1)
	if err := e.l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	pa.wantRefused(ratelimit.ReasonClosed)
	if _, err := e.l.Acquire(bg, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if _, err := e.l.Wait(bg, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Wait after Close: %v, want ErrClosed", err)
	}
	// So do the capabilities it has.
	if err := control.Refund(bg, e.l, e.held[0], 1); !errors.Is(err, ratelimit.ErrClosed) && !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Refund after Close: %v, want ErrClosed", err)
	}
	if err := control.Reconfigure(e.l, a.Config(4, ratelimit.Queue{Limit: 2})); !errors.Is(err, ratelimit.ErrClosed) && !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reconfigure after Close: %v, want ErrClosed", err)
	}
	if err := control.Reset(bg, e.l); !errors.Is(err, ratelimit.ErrClosed) && !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset after Close: %v, want ErrClosed", err)
	}
	for _, h := range e.held {
		h.Release() // does nothing, and must not panic
	}
	if err := e.l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func testIdle(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 1})
	e.clock.Advance(time.Second)
	if d, ok := e.l.IdleFor(); !ok || d != time.Second {
		t.Fatalf("fresh limiter after 1s: IdleFor = %v, %v; want 1s, true", d, ok)
	}
	lease := mustAcquire(t, e.l, 1)
	e.held = append(e.held, lease)
	if _, ok := e.l.IdleFor(); ok {
		t.Fatalf("idle with a permit in use")
	}
	e.exhaust()
	p := e.wait(bg, 1)
	e.wantQueued(1)
	if _, ok := e.l.IdleFor(); ok {
		t.Fatalf("idle with a waiter")
	}
	e.freeUntil(e.queuedBelow(1))
	e.held = append(e.held, p.wantGranted())
	for _, h := range e.held {
		h.Release()
	}
	e.held = nil
	if a.Rate {
		e.clock.Advance(a.Refill)
	}
	d, ok := e.l.IdleFor()
	if !ok {
		t.Fatalf("not idle once every permit is back")
	}
	e.clock.Advance(time.Minute)
	if d2, ok := e.l.IdleFor(); !ok || d2 != d+time.Minute {
		t.Fatalf("IdleFor a minute later = %v, %v; want %v", d2, ok, d+time.Minute)
	}
}

func testStats(t *testing.T, s *suite, a Algorithm) {
	e := newEnv(t, s, a, 3, ratelimit.Queue{Limit: 5})
	e.held = append(e.held, mustAcquire(t, e.l, 2))
	mustAcquire(t, e.l, 2)
	mustAcquire(t, e.l, 0) // a status check is not counted
	p := e.wait(bg, 3)
	want := ratelimit.Stats{Available: 1, Queued: 3, Granted: 1, Refused: 1}
	if s := e.l.Stats(); s != want && !(a.Reserves && s == ratelimit.Stats{Available: 0, Queued: 3, Granted: 1, Refused: 1}) {
		t.Fatalf("Stats = %+v, want %+v", s, want)
	}
	e.freeUntil(e.queuedBelow(1))
	p.wantGranted()
	if s := e.l.Stats(); s.Granted != 2 || s.Queued != 0 {
		t.Fatalf("Stats after the waiter's grant = %+v, want 2 granted, nothing queued", s)
	}
}

func testLarge(t *testing.T, s *suite, a Algorithm) {
	const big = 1 << 53
	e := newEnv(t, s, a, big, ratelimit.Queue{Limit: big})
	if l := mustAcquire(t, e.l, big); !l.Acquired() || l.Remaining() != 0 || l.Limit() != big {
		t.Fatalf("Acquire(2^53): %v, want granted", l)
	}
	p := e.wait(bg, big)
	e.wantQueued(big)
	if _, err := e.l.Wait(bg, big+1); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Wait(2^53+1): %v, want ErrExceedsLimit", err)
	}
	e.l.Close()
	p.wantRefused(ratelimit.ReasonClosed)
}

// testInterleavings runs random sequences of Acquire, Wait (some with a
// deadline), cancels, releases and clock advances, and checks after every
// step: waiters of an OldestFirst queue (and every token bucket
// reservation) are granted in arrival order; an Acquire refused while
// nothing was served changes nothing; a Wait accepted with a deadline is
// granted by it (time stops at every deadline, so "by" is exact), and one
// refused for its deadline could not have been. (The bounds are checked by
// testBound and RunRealClock, where each grant's instant is known.)
func testInterleavings(t *testing.T, s *suite, a Algorithm) {
	rng := rand.New(rand.NewSource(7))
	for trial := 0; trial < 6; trial++ {
		order := ratelimit.OldestFirst
		if trial%3 == 2 {
			order = ratelimit.NewestFirst
		}
		const limit = 4
		e := newEnv(t, s, a, limit, ratelimit.Queue{Limit: 6, Order: order})
		type waiting struct {
			p        *pending
			cancel   context.CancelFunc
			deadline time.Time // zero: none
			seq      int
		}
		var queue []*waiting
		// A NewestFirst queue of a window serves the newest waiter first, so
		// a deadline is checked on arrival only; reservations keep theirs.
		keepsDeadline := order == ratelimit.OldestFirst || a.Reserves
		inOrder := order == ratelimit.OldestFirst || a.Reserves
		// settle collects the answers of waiters answered so far, and
		// checks that none was served while an earlier one still waits.
		settle := func() {
			ps := make([]*pending, len(queue))
			for i, w := range queue {
				ps[i] = w.p
			}
			e.settled(ps)
			var grantedSeqs []int
			kept := queue[:0]
			for _, w := range queue {
				due := !w.deadline.IsZero() && !e.clock.Now().Before(w.deadline)
				if !w.p.answered() {
					if keepsDeadline && due {
						t.Fatalf("trial %d: waiter %d not served by its deadline", trial, w.seq)
					}
					kept = append(kept, w)
					continue
				}
				if lease, err := w.p.result(); err == nil && lease.Acquired() {
					grantedSeqs = append(grantedSeqs, w.seq)
					e.held = append(e.held, lease)
				}
				w.cancel()
			}
			queue = kept
			for _, g := range grantedSeqs {
				for _, w := range queue {
					if inOrder && w.seq < g && !w.p.answered() {
						t.Fatalf("trial %d: waiter %d served while the earlier waiter %d waits", trial, g, w.seq)
					}
				}
			}
		}
		for step, seq := 0, 0; step < 60; step++ {
			switch op := rng.Intn(10); {
			case op < 3: // Acquire
				p := 1 + rng.Intn(limit)
				before := e.l.Stats()
				lease := mustAcquire(t, e.l, p)
				after := e.l.Stats()
				if lease.Acquired() {
					e.held = append(e.held, lease)
				} else if after.Queued == before.Queued && after.Available != before.Available {
					t.Fatalf("trial %d: a refused Acquire(%d) changed Available from %d to %d", trial, p, before.Available, after.Available)
				}
			case op < 6: // Wait, a third with a deadline; never one that evicts
				p := 1 + rng.Intn(limit)
				if e.l.Stats().Queued+int64(p) > 6 {
					continue
				}
				ctx, cancel := context.WithCancel(bg)
				var deadline time.Time
				if a.Rate && rng.Intn(3) == 0 {
					deadline = e.clock.Now().Add(time.Duration(rng.Int63n(int64(a.Refill))))
					ctx, cancel = context.WithDeadline(bg, deadline)
				}
				w := &waiting{p: e.wait(ctx, p), cancel: cancel, deadline: deadline, seq: seq}
				seq++
				if w.p.answered() {
					lease, err := w.p.result()
					if err == nil && lease.Acquired() {
						e.held = append(e.held, lease)
					} else if err == nil && lease.Reason() == ratelimit.ReasonDeadline {
						if d, ok := lease.RetryAfter(); !ok || !e.clock.Now().Add(d).After(deadline) {
							t.Fatalf("trial %d: Wait refused for a deadline %v away, RetryAfter %v, %v", trial, deadline.Sub(e.clock.Now()), d, ok)
						}
					}
					cancel()
					continue
				}
				queue = append(queue, w)
			case op < 7 && len(queue) > 0: // cancel a waiter
				k := rng.Intn(len(queue))
				queue[k].cancel()
				queue[k].p.result()
			case op < 8 && !a.Rate && len(e.held) > 0: // release
				k := rng.Intn(len(e.held))
				e.held[k].Release()
				e.held = append(e.held[:k], e.held[k+1:]...)
			default: // time passes, up to the earliest deadline of a waiter
				if a.Rate {
					to := e.clock.Now().Add(time.Duration(rng.Int63n(int64(a.Refill / 4))))
					for _, w := range queue {
						if !w.deadline.IsZero() && w.deadline.Before(to) {
							to = w.deadline
						}
					}
					e.clock.Set(to)
				}
			}
			settle()
		}
		e.l.Close()
		settle()
	}
}
