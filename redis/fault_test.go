package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// Faults on real servers: a server paused (SIGSTOP) and resumed, a server
// killed and restarted, a Cluster node killed and restarted, while callers
// of limiters of four algorithms (token bucket, fixed window, sliding log,
// concurrency), under each failure policy (FailError, FailOpen, FailClosed,
// WithFallback), keep calling. For each fault:
//
//   - every call (Acquire, Wait, StatsContext, Refund, Release) answers
//     within the limiter's timeout, plus slack for a loaded machine, with
//     the policy's answer when Redis cannot decide (FailError: an error
//     wrapping ErrUnavailable, and context.DeadlineExceeded when the server
//     could only be waited for; FailOpen: a grant; FailClosed: a refusal
//     with ReasonUnavailable; WithFallback: the fallback's answer);
//   - once the server answers again, Redis counts the grants its callers
//     saw, give or take only the calls whose answer they did not get (a
//     call the server ran after its caller gave up: its decision stands),
//     and then grants exactly what it says is left;
//   - leases held across the fault are renewed, those nobody holds expire
//     after the TTL, and releasing the held ones frees their permits;
//   - no goroutine is left once the limiters and clients are closed.
//
// The clients have go-redis's default options (no ContextTimeoutEnabled, a
// 3s ReadTimeout, 3 retries), so the bounds are the limiter's own.
const (
	faultTimeout = 200 * time.Millisecond // every limiter's WithTimeout
	// faultSlack is what a loaded 2-core machine under -race may add to a
	// call; without the limiter's bound a call waits for the client's 3s
	// ReadTimeout, or for the server to come back.
	faultSlack = time.Second
	// faultPause is how long a server is paused: longer than a call's
	// bound, so that a call waiting for the server breaks it.
	faultPause  = faultTimeout + 2*faultSlack
	faultPhase  = 300 * time.Millisecond // callers call before the fault, and after the recovery
	faultPace   = 10 * time.Millisecond  // each caller's pause between calls
	faultCalls  = 3                      // callers per limiter
	faultLimit  = 300                    // rate limiters' permits: more than the callers take
	faultPermit = 40                     // concurrency limiters' permits
	faultHeld   = 2                      // leases each concurrency limiter holds across the fault
	// faultLeaseTTL is the concurrency limiters' lease TTL, on a clock the
	// test moves: leases expire when the test says, not when the machine
	// is slow.
	faultLeaseTTL = time.Minute
	// faultLong is a window or refill period no test outlives: nothing comes
	// back with time, so every permit Redis counts stays counted.
	faultLong = 1000 * 24 * time.Hour
	// faultExactTimeout bounds the calls that read and use up Redis's
	// state after the recovery: no load on the machine reaches it.
	faultExactTimeout = 10 * time.Second
)

var faultPolicies = []string{"FailError", "FailOpen", "FailClosed", "Fallback"}

var faultAlgorithms = []struct {
	name string
	cfg  ratelimit.Config
}{
	{"tokenbucket", tokenbucket.Config{Burst: faultLimit, Period: faultLong, PerPeriod: 1}},
	{"fixedwindow", fixedwindow.Config{Limit: faultLimit, Window: faultLong}},
	{"slidinglog", slidinglog.Config{Limit: faultLimit, Window: faultLong}},
	{"concurrency", concurrency.Config{Limit: faultPermit}},
}

// noLeaks checks, when t ends (after the cleanups registered later), that
// no goroutine started since is left: the calls abandoned while a server
// could not answer finished once it answered or its connections died, and
// closing the limiters and the client stopped the rest.
func noLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		for deadline := time.Now().Add(5 * time.Second); ; {
			err := goleak.Find(before)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left, with the limiters and the client closed: %v", err)
				return
			}
		}
	})
}

// TestFaultServerPaused: the server is stopped (SIGSTOP) for faultPause,
// then resumed. What the callers send meanwhile waits in its socket and runs
// when it resumes, long after the callers went with their timeout.
func TestFaultServerPaused(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	r := newFaultRun(t, goredis.NewClient(&goredis.Options{Addr: srv.Addr}), goredis.NewClient(&goredis.Options{Addr: srv.Addr}))
	r.timeoutsOnly = true
	r.addAll(func(name string) string { return name })
	r.run(func() { srv.Pause(t) }, faultPause, func() { srv.Resume(t) })
	r.check()
}

// TestFaultServerKilled: the server is killed (SIGKILL), and restarted on
// its port half a second later. It writes every acknowledged write to disk
// before the reply (appendfsync always), so the restarted server counts
// what its callers were told.
func TestFaultServerKilled(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	r := newFaultRun(t, goredis.NewClient(&goredis.Options{Addr: srv.Addr}), goredis.NewClient(&goredis.Options{Addr: srv.Addr}))
	r.addAll(func(name string) string { return name })
	r.run(srv.Stop, 500*time.Millisecond, func() { srv.Restart(t) })
	r.check()
}

// TestFaultClusterNodeKilled: a master of a 3-master Cluster is killed,
// and restarted half a second later with its data and its nodes.conf: it
// rejoins as the same master of the same slots, and takes writes again
// about 2s later. The limiters under test have their keys on that node;
// bystanders, on the other nodes, are never answered with a failure.
func TestFaultClusterNodeKilled(t *testing.T) {
	noLeaks(t)
	nodes := redistest.StartCluster(t, "--appendonly", "yes", "--appendfsync", "always")
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	r := newFaultRun(t, c, goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs}))
	victim := nodes[0]
	// keyOn names keys whose slot the victim serves (or does not).
	keyOn := func(onVictim bool) func(string) string {
		return func(name string) string {
			for i := 0; ; i++ {
				key := fmt.Sprintf("%s-%d", name, i)
				m, err := c.MasterForKey(bg, key)
				if err != nil {
					t.Fatal(err)
				}
				if (m.Options().Addr == victim.Addr) == onVictim {
					return key
				}
			}
		}
	}
	r.addAll(keyOn(true))
	// A bystander's timeout is longer, so that what fails it is the dead
	// node (a call sent with the dead node's, or held up behind it), not a
	// machine too loaded to answer within faultTimeout.
	for _, a := range faultAlgorithms {
		r.add(a.name, a.cfg, "FailError", keyOn(false)("fault-bystander-"+a.name), faultTimeout+faultSlack).bystander = true
	}
	r.run(victim.Stop, 500*time.Millisecond, func() {
		victim.Restart(t)
		redistest.WaitClusterOK(t, victim.Addr)
	})
	r.check()
}

// countingFallback is a WithFallback limiter that counts its answers: each
// answers a call that Redis failed to decide.
type countingFallback struct {
	memory.Limiter
	calls, grants atomic.Int64
}

func (f *countingFallback) count(lease ratelimit.Lease, err error) (ratelimit.Lease, error) {
	f.calls.Add(1)
	if err == nil && lease.Acquired() {
		f.grants.Add(1)
	}
	return lease, err
}

func (f *countingFallback) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return f.count(f.Limiter.Acquire(ctx, permits))
}

func (f *countingFallback) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return f.count(f.Limiter.Wait(ctx, permits))
}

// firstError is a limiter that keeps the first error its Acquire returned.
type firstError struct {
	ratelimit.Limiter
	err atomic.Value
}

func (f *firstError) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	lease, err := f.Limiter.Acquire(ctx, permits)
	if err != nil {
		f.err.CompareAndSwap(nil, err.Error())
	}
	return lease, err
}

// faultCase is one limiter under a fault, and what its callers were told.
type faultCase struct {
	name, policy, key string
	cfg               ratelimit.Config
	l                 *redis.Limiter
	fallback          *countingFallback // WithFallback only
	limit             int64
	timeout           time.Duration // its WithTimeout
	conc              bool          // concurrency: the tally is the leases in Redis
	// refunds: callers refund grants (FailError and FailClosed rate
	// limiters, whose every grant is Redis's).
	refunds   bool
	bystander bool // on a Cluster node that stays up
	held      []ratelimit.Lease
	// exact is another handle on the same key, on the run's other client,
	// with a timeout no load reaches, to read and use up what Redis counts
	// after the recovery.
	exact     *redis.Limiter
	available int64        // what Redis said was left, once the callers stopped
	firstErr  atomic.Value // the first failure's error, for the report

	grants         atomic.Int64 // Acquire and Wait grants, Redis's or the policy's
	refunded       atomic.Int64 // refunds Redis confirmed
	unknownGrants  atomic.Int64 // Acquire and Wait calls Redis failed to answer: it may have run them
	unknownRefunds atomic.Int64 // likewise, refunds
	failures       atomic.Int64 // every answer that says Redis failed (the fallback's are counted there)
	openGrants     atomic.Int64 // FailOpen's grants made with no limit applied
}

// faultRun is one fault: its limiters, their callers, and the checks.
type faultRun struct {
	t     *testing.T
	c     goredis.UniversalClient // the client of the limiters under test
	exact goredis.UniversalClient // the client of their exact handles
	clock *ratelimittest.Clock    // the concurrency limiters'
	// timeoutsOnly: every failure is the limiter's timeout (a paused server
	// answers nothing; a dead one refuses connections, a faster failure).
	timeoutsOnly bool
	cases        []*faultCase
	calls        atomic.Int64
	overrun      atomic.Int64 // ns: the most a call took past its timeout
}

// newFaultRun makes a run on the client c; exact is another client to the
// same servers, whose pool did not live through the fault: go-redis, once
// its dials failed as many times as its pool size, fails new connections
// with the last dial error until a retry a second later succeeds, a while
// after the server is back.
func newFaultRun(t *testing.T, c, exact goredis.UniversalClient) *faultRun {
	t.Cleanup(func() { // after the limiters' Close (cleanups run last first)
		c.Close()
		exact.Close()
	})
	return &faultRun{t: t, c: c, exact: exact, clock: ratelimittest.NewClock()}
}

// addAll adds a limiter of each algorithm under each policy, its key named
// by key.
func (r *faultRun) addAll(key func(name string) string) {
	for _, a := range faultAlgorithms {
		for _, p := range faultPolicies {
			r.add(a.name, a.cfg, p, key("fault-"+a.name+"-"+p), faultTimeout)
		}
	}
}

func (r *faultRun) add(alg string, cfg ratelimit.Config, policy, key string, timeout time.Duration) *faultCase {
	c := &faultCase{name: alg + "/" + policy, policy: policy, key: key, cfg: cfg, limit: cfg.Capacity(), timeout: timeout}
	_, c.conc = cfg.(concurrency.Config)
	c.refunds = !c.conc && (policy == "FailError" || policy == "FailClosed")
	opts := []redis.Option{redis.WithTimeout(timeout)}
	switch policy {
	case "FailOpen":
		opts = append(opts, redis.WithFailurePolicy(redis.FailOpen))
	case "FailClosed":
		opts = append(opts, redis.WithFailurePolicy(redis.FailClosed))
	case "Fallback":
		m, err := memory.New(cfg)
		if err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() { m.Close() })
		c.fallback = &countingFallback{Limiter: m}
		opts = append(opts, redis.WithFallback(c.fallback))
	}
	if c.conc {
		opts = append(opts, redis.WithClock(r.clock), redis.WithLeaseTTL(faultLeaseTTL))
	}
	c.l = mustNew(r.t, r.c, key, cfg, opts...)
	exact := []redis.Option{redis.WithTimeout(faultExactTimeout)}
	if c.conc {
		exact = append(exact, redis.WithClock(r.clock), redis.WithLeaseTTL(faultLeaseTTL))
	}
	c.exact = mustNew(r.t, r.exact, key, cfg, exact...)
	r.cases = append(r.cases, c)
	return c
}

// run holds leases, starts the callers, lets them call for a phase, breaks
// the server (inject), has a lease renewal fall due, leaves it broken for
// outage, mends it (recover, which returns once the server is back), waits
// until Redis decides every limiter's calls again, lets the callers call
// another phase, and stops them.
func (r *faultRun) run(inject func(), outage time.Duration, recover func()) {
	t := r.t
	for _, c := range r.cases {
		for i := 0; c.conc && i < faultHeld; i++ {
			lease, err := c.l.Acquire(bg, 1)
			if err != nil || !lease.Acquired() {
				t.Fatalf("%s: holding a lease before the fault: %v %v", c.name, lease, err)
			}
			c.held = append(c.held, lease)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range r.cases {
		for w := 0; w < faultCalls; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.caller(c, w, stop)
			}()
		}
	}
	defer func() { // also when a step below fails the test
		close(stop)
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			panic("fault callers still calling 30s after they were told to stop")
		}
	}()
	time.Sleep(faultPhase)
	start := time.Now()
	inject()
	r.clock.Advance(faultLeaseTTL / 3) // a renewal falls due while the server cannot answer
	time.Sleep(outage)
	recover()
	back := time.Since(start)
	for _, c := range r.cases {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := c.l.StatsContext(bg); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: Redis still not deciding 15s after the recovery: %v", c.name, err)
			}
		}
	}
	t.Logf("server back %v after the fault began, deciding every limiter's calls %v after", back.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	time.Sleep(faultPhase)
}

// caller calls c's limiter until stop, in turn Acquire, Wait, StatsContext,
// and Refund (of its last grant, where refunds are made) or StatsContext
// again; a concurrency caller first releases (Release, or Refund) the lease
// it holds, if any.
func (r *faultRun) caller(c *faultCase, w int, stop <-chan struct{}) {
	var last ratelimit.Lease // a grant to refund, or a lease held
	have := false
	for i := w; ; i++ {
		if have && c.conc {
			r.release(c, last, i)
			have = false
		}
		select {
		case <-stop:
			return
		default:
		}
		switch i % 4 {
		case 0, 1:
			op := "Acquire"
			if i%4 == 1 {
				op = "Wait"
			}
			r.timed(c, op, func() {
				var lease ratelimit.Lease
				var err error
				if op == "Acquire" {
					lease, err = c.l.Acquire(bg, 1)
				} else {
					// The round trip's timeout comes first, even late.
					ctx, cancel := context.WithTimeout(bg, c.timeout+faultSlack)
					lease, err = c.l.Wait(ctx, 1)
					cancel()
				}
				if r.decided(c, op, lease, err) && (c.conc || c.refunds) {
					last, have = lease, true
				}
			})
		case 3:
			if have {
				r.timed(c, "Refund", func() {
					if err := c.l.Refund(bg, last, 1); err != nil {
						r.unavailable(c, "Refund", err)
						c.unknownRefunds.Add(1)
					} else {
						c.refunded.Add(1)
					}
				})
				have = false
				break
			}
			fallthrough
		case 2:
			r.timed(c, "StatsContext", func() {
				s, err := c.l.StatsContext(bg)
				if err != nil {
					r.unavailable(c, "StatsContext", err)
				} else if s.Available < 0 || s.Available > c.limit {
					r.t.Errorf("%s: StatsContext: %+v, out of 0..%d", c.name, s, c.limit)
				}
			})
		}
		time.Sleep(faultPace)
	}
}

// release gives back a concurrency lease, by Release or by Refund.
func (r *faultRun) release(c *faultCase, lease ratelimit.Lease, i int) {
	if i%2 == 0 {
		r.timed(c, "Release", lease.Release)
		return
	}
	r.timed(c, "Refund", func() {
		if err := c.l.Refund(bg, lease, 1); err != nil {
			r.t.Errorf("%s: Refund of a concurrency lease: %v, want nil (it is Release)", c.name, err)
		}
	})
}

// timed makes one call and checks the bound: the limiter's timeout, plus
// slack.
func (r *faultRun) timed(c *faultCase, op string, call func()) {
	start := time.Now()
	call()
	took := time.Since(start)
	r.calls.Add(1)
	if took > c.timeout+faultSlack {
		r.t.Errorf("%s: %s answered after %v, want within its %v timeout (+%v slack)", c.name, op, took, c.timeout, faultSlack)
	}
	over := int64(took - c.timeout)
	for o := r.overrun.Load(); over > o && !r.overrun.CompareAndSwap(o, over); o = r.overrun.Load() {
	}
}

// unavailable checks the error of a call that Redis failed to answer: it
// wraps ErrUnavailable and, where only the timeout could end the call, the
// timeout's context.DeadlineExceeded.
func (r *faultRun) unavailable(c *faultCase, op string, err error) {
	c.failures.Add(1)
	c.firstErr.CompareAndSwap(nil, op+": "+err.Error())
	if !errors.Is(err, redis.ErrUnavailable) || (r.timeoutsOnly && !errors.Is(err, context.DeadlineExceeded)) {
		want := "ErrUnavailable"
		if r.timeoutsOnly {
			want += " and context.DeadlineExceeded"
		}
		r.t.Errorf("%s: %s: %v, want an error wrapping %s", c.name, op, err, want)
	}
}

// decided checks an Acquire's or Wait's answer against c's policy (nothing
// is refused for want of permits here) and tallies it; it reports a grant.
func (r *faultRun) decided(c *faultCase, op string, lease ratelimit.Lease, err error) bool {
	switch {
	case err != nil:
		if c.policy != "FailError" {
			c.failures.Add(1)
			c.firstErr.CompareAndSwap(nil, op+": "+err.Error())
			r.t.Errorf("%s: %s: %v; the %s policy answers without an error", c.name, op, err, c.policy)
			return false
		}
		r.unavailable(c, op, err)
		c.unknownGrants.Add(1)
		return false
	case lease.Acquired():
		c.grants.Add(1)
		if c.policy == "FailOpen" && lease.Limit() == -1 { // the policy's grant: Redis failed
			c.failures.Add(1)
			c.openGrants.Add(1)
		}
		return true
	case c.policy == "FailClosed" && lease.Reason() == ratelimit.ReasonUnavailable:
		c.failures.Add(1)
		c.unknownGrants.Add(1)
		return false
	}
	r.t.Errorf("%s: %s: %v, with permits to spare: not what the %s policy answers", c.name, op, lease, c.policy)
	return false
}

// check is what holds once the server answers again: every limiter met the
// fault (bystanders did not); Redis counts the permits its callers were
// granted, give or take the calls whose fate they could not know; held
// leases were renewed across the fault and the ones left behind expire
// after the TTL; and then Redis grants exactly what it says is left.
func (r *faultRun) check() {
	t := r.t
	var failures int64
	for _, c := range r.cases {
		n := c.failures.Load()
		if c.fallback != nil {
			n += c.fallback.calls.Load()
		}
		failures += n
		if c.bystander && n != 0 {
			t.Errorf("%s, on a node that stayed up: %d answers of a failure (the first: %v), want none", c.name, n, c.firstErr.Load())
		}
		if !c.bystander && n == 0 {
			t.Errorf("%s: no answer of a failure: the callers never met the fault", c.name)
		}
	}
	t.Logf("%d calls, %d answered as failures, the slowest %v past its timeout", r.calls.Load(), failures, time.Duration(r.overrun.Load()).Round(time.Millisecond))

	for _, c := range r.cases {
		if c.conc {
			continue
		}
		s, err := c.exact.StatsContext(bg)
		if err != nil {
			t.Fatalf("%s: StatsContext after the recovery: %v", c.name, err)
		}
		c.available = s.Available
		// used is what Redis counts: the grants its callers saw (less the
		// refunds it confirmed), plus those of calls it ran after their
		// callers gave up (at most one per call answered as a failure),
		// less the refunds of that kind.
		used, grants := c.limit-s.Available, c.grants.Load()
		var lo, hi int64
		switch {
		case c.refunds: // FailError, FailClosed: every grant seen is Redis's
			lo = grants - c.refunded.Load() - c.unknownRefunds.Load()
			hi = grants - c.refunded.Load() + c.unknownGrants.Load()
		case c.fallback != nil:
			lo = grants - c.fallback.grants.Load()
			hi = lo + c.fallback.calls.Load()
		default: // FailOpen: a grant seen is Redis's, or the policy's (Limit -1), which Redis may still have run
			lo, hi = grants-c.openGrants.Load(), grants
		}
		if used < lo || used > hi {
			t.Errorf("%s: Redis counts %d permits used; its callers saw %d grants, %d refunds, %d calls and %d refunds unanswered%s: want %d to %d",
				c.name, used, grants, c.refunded.Load(), c.unknownGrants.Load(), c.unknownRefunds.Load(), r.fallbackTally(c), lo, hi)
		}
	}

	r.checkLeases()

	// Decisions are exact again: Redis grants exactly what it said was
	// left, to callers racing for it, and then refuses; the handle that met
	// the fault reads the same.
	var wg sync.WaitGroup
	for _, c := range r.cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := &firstError{Limiter: c.exact}
			if got := hammer([]ratelimit.Limiter{e}, 2); got != c.available {
				t.Errorf("%s: granted %d after the recovery (error: %v), want exactly the %d Redis said were left", c.name, got, e.err.Load(), c.available)
			}
		}()
	}
	wg.Wait()
	for _, c := range r.cases {
		if s, err := c.exact.StatsContext(bg); err != nil || s.Available != 0 {
			t.Errorf("%s: StatsContext once all was granted: %+v %v, want 0 available", c.name, s, err)
		}
		if lease, err := c.exact.Acquire(bg, 1); err != nil || lease.Reason() != ratelimit.ReasonLimit {
			t.Errorf("%s: Acquire once all was granted: %v %v, want refused at the limit", c.name, lease, err)
		}
		if s, err := statsOf(c.l); err != nil || s.Available != 0 {
			t.Errorf("%s: StatsContext of the handle that met the fault, once all was granted: %+v %v, want 0 available", c.name, s, err)
		}
		if c.conc { // Close releases the leases: all the permits are free again
			c.exact.Close()
			if s, err := statsOf(c.l); err != nil || s.Available != c.limit {
				t.Errorf("%s: after Close: %+v %v, want all %d permits free", c.name, s, err, c.limit)
			}
		}
	}
}

// statsOf is l's StatsContext, asked again (for up to 5s) while it fails:
// a loaded machine, a client whose pool still fails new connections.
func statsOf(l *redis.Limiter) (ratelimit.Stats, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := l.StatsContext(bg)
		if err == nil || !errors.Is(err, redis.ErrUnavailable) || time.Now().After(deadline) {
			return s, err
		}
	}
}

func (r *faultRun) fallbackTally(c *faultCase) string {
	if c.fallback == nil {
		return ""
	}
	return fmt.Sprintf(" (the fallback answered %d, granting %d)", c.fallback.calls.Load(), c.fallback.grants.Load())
}

// checkLeases: the clock moves a third of the TTL at a time, four times.
// Each step, the renewer renews the leases held across the fault to expire
// a TTL later, and nothing else (a grant whose caller gave up, a release
// that failed: leases nobody holds); after the four, those are past their
// TTL, and Redis counts exactly the leases held. Releasing them after the
// recovery frees every permit.
func (r *faultRun) checkLeases() {
	t := r.t
	for step := 1; step <= 4; step++ {
		r.clock.Advance(faultLeaseTTL / 3)
		want := float64(r.clock.Now().Add(faultLeaseTTL).UnixMicro())
		for _, c := range r.cases {
			if !c.conc {
				continue
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				renewed := 0
				for _, s := range scores(t, r.exact, []string{"ratelimit:{" + c.key + "}:cc"}) {
					if s >= want {
						renewed++
					}
				}
				if renewed == faultHeld {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: step %d: %d leases renewed to %v, want the %d held", c.name, step, renewed, want, faultHeld)
				}
			}
		}
	}
	for _, c := range r.cases {
		if !c.conc {
			continue
		}
		if s, err := c.exact.StatsContext(bg); err != nil || s.Available != c.limit-faultHeld {
			t.Errorf("%s: past the TTL: %+v %v, want %d available (all but the %d leases held)", c.name, s, err, c.limit-faultHeld, faultHeld)
		}
		for _, lease := range c.held {
			r.timed(c, "Release", lease.Release)
		}
		s, err := c.exact.StatsContext(bg)
		if err != nil || s.Available != c.limit {
			t.Errorf("%s: the held leases released: %+v %v, want all %d permits free", c.name, s, err, c.limit)
		}
		c.available = s.Available
	}
}
