package memory_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/waittrace"
)

// TestKeyedDecidesAsALimiterPerKey: over random sequences of Acquire,
// Wait (some with a deadline, some cancelled), releases, refunds, resets,
// reconfigurations and clock advances on a few keys, a Keyed answers
// exactly as memory.New limiters, one per key, on the same fake clock:
// the same leases (figures and reasons), the same errors, the same
// idleness. With a short idle timeout the sweeper evicts idle keys
// between the steps (a key evicted before a Reconfigure starts afresh
// under the new configuration, which a limiter never evicted does not:
// the sequences that evict do not reconfigure).
func TestKeyedDecidesAsALimiterPerKey(t *testing.T) {
	const sequences, steps = 25, 120
	for _, a := range conformance.Algorithms() {
		for _, evict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/evict=%v", a.Name, evict), func(t *testing.T) {
				t.Parallel()
				var evicted, queued int64
				for seq := 0; seq < sequences; seq++ {
					p := newParity(t, a, rand.New(rand.NewSource(int64(seq))), evict)
					for i := 0; i < steps; i++ {
						p.step(fmt.Sprintf("seq %d step %d", seq, i))
					}
					p.finish(fmt.Sprintf("seq %d end", seq))
					evicted += p.keyed.Stats().Evicted
					queued += p.queued
				}
				// The comparison means something only if keys were evicted
				// (when they may be) and Waits queued.
				if evict && evicted == 0 || queued == 0 {
					t.Fatalf("%d keys evicted, %d Waits queued: the sequences test too little", evicted, queued)
				}
			})
		}
	}
}

// parity runs the same calls on a Keyed and on a limiter per key.
type parity struct {
	t       *testing.T
	a       conformance.Algorithm
	rng     *rand.Rand
	clock   *ratelimittest.Clock
	keyed   *memory.Keyed
	refs    map[string]memory.Limiter
	keys    []string
	limit   int
	q       ratelimit.Queue
	cfg     ratelimit.Config
	evict   bool
	grants  []grant    // grants of both, not given back yet
	pending []*waiting // Waits queued on both
	queued  int64
}

type grant struct {
	key     string
	permits int
	k, r    ratelimit.Lease
}

// waiting is a Wait started on both sides.
type waiting struct {
	key     string
	permits int
	cancel  [2]context.CancelFunc
	answer  [2]chan answer
}

func newParity(t *testing.T, a conformance.Algorithm, rng *rand.Rand, evict bool) *parity {
	p := &parity{t: t, a: a, rng: rng, clock: ratelimittest.NewClock(), evict: evict, keys: []string{"a", "b", "c"}}
	p.clock.Advance(time.Duration(rng.Int63n(int64(time.Second))))
	p.limit = 1 + rng.Intn(5)
	p.a = a
	p.q = ratelimit.Queue{Limit: rng.Intn(2 * p.limit), Order: ratelimit.QueueOrder(rng.Intn(2))}
	cfg := a.Config(p.limit, p.q)
	idle := time.Hour
	if evict { // a sweep every eighth of the refill
		idle = p.refill() / 2
	}
	var err error
	if p.keyed, err = memory.NewKeyed(cfg, memory.WithClock(p.clock), memory.WithIdleTimeout(idle)); err != nil {
		t.Fatal(err)
	}
	p.cfg, p.refs = cfg, map[string]memory.Limiter{}
	return p
}

// ref is the limiter of key k: the one made when the Keyed added k, or a
// new one under the configuration in force for a key the Keyed holds no
// entry for (a key not seen, or whose calls all failed their checks),
// which starts so there; add keeps it.
func (p *parity) ref(k string) memory.Limiter {
	if l := p.refs[k]; l != nil {
		return l
	}
	l, err := memory.New(p.cfg, memory.WithClock(p.clock))
	if err != nil {
		p.t.Fatal(err)
	}
	return l
}

// add keeps l as k's limiter, once a call on k passed its checks: the
// Keyed holds an entry for k from then on (its sequences never evict, or
// never reconfigure).
func (p *parity) add(k string, l memory.Limiter) {
	if p.refs[k] == nil {
		p.refs[k] = l
	}
}

// refill is how long the algorithm takes to give every permit back, a
// second for concurrency (whose permits come back on Release).
func (p *parity) refill() time.Duration {
	if p.a.Refill == 0 {
		return time.Second
	}
	return p.a.Refill
}

func (p *parity) key() string { return p.keys[p.rng.Intn(len(p.keys))] }

// step makes one random call on both sides and compares.
func (p *parity) step(at string) {
	t, rng := p.t, p.rng
	switch r := rng.Intn(100); {
	case r < 25:
		unit := p.refill() / time.Duration(p.limit)
		p.clock.Advance(time.Duration(rng.Int63n(int64(2 * unit))))
	case r < 50:
		k, n := p.key(), rng.Intn(p.limit+2) // limit+1: more than the capacity
		ref := p.ref(k)
		kl, kerr := p.keyed.Acquire(bg, k, n)
		rl, rerr := ref.Acquire(bg, n)
		p.same(fmt.Sprintf("%s: Acquire(%q, %d)", at, k, n), kl, kerr, rl, rerr)
		if rerr == nil {
			p.add(k, ref)
		}
		p.keep(k, n, kl, rl)
	case r < 68:
		p.wait(at)
	case r < 76 && len(p.pending) > 0:
		i := rng.Intn(len(p.pending))
		w := p.pending[i]
		p.pending = append(p.pending[:i], p.pending[i+1:]...)
		w.cancel[0]()
		w.cancel[1]()
		p.collect(at+": cancelled Wait", w)
	case r < 84 && len(p.grants) > 0:
		i := rng.Intn(len(p.grants))
		g := p.grants[i]
		p.grants = append(p.grants[:i], p.grants[i+1:]...)
		if rng.Intn(2) == 0 {
			g.k.Release()
			g.r.Release()
			break
		}
		kerr := control.Refund(bg, p.keyed.For(g.key), g.k, g.permits)
		rerr := control.Refund(bg, p.ref(g.key), g.r, g.permits)
		what := fmt.Sprintf("%s: Refund(%q, %d)", at, g.key, g.permits)
		p.sameErr(what, kerr, rerr)
		p.status(what, g.key)
	case r < 88:
		k := p.key()
		what := fmt.Sprintf("%s: Reset(%q)", at, k)
		p.sameErr(what, control.Reset(bg, p.keyed.For(k)), control.Reset(bg, p.ref(k)))
		p.status(what, k)
	case r < 92 && !p.evict:
		p.limit = 1 + rng.Intn(5)
		p.cfg = p.a.Config(p.limit, p.q)
		kerr := p.keyed.Reconfigure(p.cfg)
		for k, l := range p.refs {
			p.sameErr(fmt.Sprintf("%s: Reconfigure(%v), key %q", at, p.cfg, k), kerr, l.Reconfigure(p.cfg))
		}
	default:
		// A Wait answered by the last steps has returned only once
		// collected: the key's limiter counts it in flight until then.
		if len(p.pending) > 0 {
			break
		}
		for _, k := range p.keys {
			il := p.keyed.For(k).(interface{ IdleFor() (time.Duration, bool) })
			_, kok := il.IdleFor()
			_, rok := p.ref(k).IdleFor()
			if kok != rok {
				t.Fatalf("%s: key %q idle %v, its limiter's %v", at, k, kok, rok)
			}
		}
	}
}

// status compares a status check on k, a key both sides hold, after
// what: the figures of now, which a call that changed something on one
// side only shows.
func (p *parity) status(what, k string) {
	p.t.Helper()
	if ref := p.refs[k]; ref != nil {
		kl, kerr := p.keyed.Acquire(bg, k, 0)
		rl, rerr := ref.Acquire(bg, 0)
		p.same(what+", then a status check", kl, kerr, rl, rerr)
	}
}

// keep records a grant of both sides for a later release or refund.
func (p *parity) keep(k string, n int, kl, rl ratelimit.Lease) {
	if kl.Acquired() && n > 0 {
		p.grants = append(p.grants, grant{k, n, kl, rl})
	}
}

// wait starts the same Wait on both sides, and returns once each has
// answered or joined its queue.
func (p *parity) wait(at string) {
	k, n := p.key(), p.rng.Intn(p.limit+1)
	ctx := bg
	var deadline time.Duration
	if p.rng.Intn(3) == 0 { // a deadline on the limiters' clock; far away in real time
		deadline = time.Duration(p.rng.Int63n(int64(p.refill())))
	}
	w := &waiting{key: k, permits: n}
	var joined [2]bool
	ref := p.ref(k)
	p.add(k, ref) // every Wait here passes its checks
	for side := range 2 {
		c := ctx
		if deadline > 0 {
			c, w.cancel[side] = context.WithDeadline(c, p.clock.Now().Add(deadline))
		} else {
			c, w.cancel[side] = context.WithCancel(c)
		}
		queued := make(chan struct{}, 1)
		c = waittrace.WithHooks(c, &waittrace.Hooks{Queued: func(context.Context, int) { queued <- struct{}{} }})
		w.answer[side] = make(chan answer, 1)
		go func(side int) {
			var a answer
			if side == 0 {
				a.lease, a.err = p.keyed.Wait(c, k, n)
			} else {
				a.lease, a.err = ref.Wait(c, n)
			}
			w.answer[side] <- a
		}(side)
		select {
		case <-queued:
			joined[side] = true
		case a := <-w.answer[side]:
			w.answer[side] <- a // for collect
			// A waiter served as soon as it queued has told both by now
			// (the hook runs before the answer), and select picks either.
			select {
			case <-queued:
				joined[side] = true
			default:
			}
		case <-time.After(5 * time.Second):
			p.t.Fatalf("%s: Wait(%q, %d) neither queued nor answered in 5s", at, k, n)
		}
	}
	what := fmt.Sprintf("%s: Wait(%q, %d, deadline %v)", at, k, n, deadline)
	if joined[0] != joined[1] {
		p.t.Fatalf("%s: queued on the Keyed %v, on the limiter %v", what, joined[0], joined[1])
	}
	if joined[0] {
		p.queued++
		p.pending = append(p.pending, w)
		return
	}
	p.collect(what, w)
}

// collect compares the answers of a Wait on both sides.
func (p *parity) collect(what string, w *waiting) {
	var a [2]answer
	for side := range 2 {
		select {
		case a[side] = <-w.answer[side]:
		case <-time.After(5 * time.Second):
			p.t.Fatalf("%s: no answer in 5s", what)
		}
		w.cancel[side]()
	}
	p.same(what, a[0].lease, a[0].err, a[1].lease, a[1].err)
	p.keep(w.key, w.permits, a[0].lease, a[1].lease)
}

// finish cancels what still waits, compares the answers, and closes both
// sides.
func (p *parity) finish(at string) {
	for _, w := range p.pending {
		w.cancel[0]()
		w.cancel[1]()
		p.collect(at+": Wait cancelled at the end", w)
	}
	p.pending = nil
	p.keyed.Close()
	for _, l := range p.refs {
		l.Close()
	}
}

func (p *parity) same(what string, kl ratelimit.Lease, kerr error, rl ratelimit.Lease, rerr error) {
	p.t.Helper()
	p.sameErr(what, kerr, rerr)
	kr, kok := kl.RetryAfter()
	rr, rok := rl.RetryAfter()
	if kl.Acquired() != rl.Acquired() || kl.Reason() != rl.Reason() || kl.Remaining() != rl.Remaining() ||
		kl.Limit() != rl.Limit() || kl.ResetAfter() != rl.ResetAfter() || kr != rr || kok != rok {
		p.t.Fatalf("%s: the Keyed's %v, the limiter's %v", what, kl, rl)
	}
}

func (p *parity) sameErr(what string, kerr, rerr error) {
	p.t.Helper()
	if fmt.Sprint(kerr) != fmt.Sprint(rerr) {
		p.t.Fatalf("%s: the Keyed's error %v, the limiter's %v", what, kerr, rerr)
	}
}
