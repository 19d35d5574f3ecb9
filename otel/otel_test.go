package otel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/shadow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

const (
	requests = limitotel.RequestsName
	permits  = limitotel.PermitsName
	queued   = limitotel.QueuedName
	inQueue  = limitotel.TimeInQueueName
	active   = limitotel.ActiveLeasesName
	leaseDur = limitotel.LeaseDurationName
	backDur  = limitotel.BackendDurationName
	failures = limitotel.BackendFailuresName
	avail    = limitotel.AvailableName
)

// A clock an hour ahead of the real one, so that a ctx deadline set from it
// is not already past.
func newClock() *ratelimittest.Clock { return ratelimittest.NewClockAt(time.Now().Add(time.Hour)) }

func mustMemory(t *testing.T, cfg ratelimit.Config, clock ratelimit.Clock) memory.Limiter {
	t.Helper()
	l, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustNew(t *testing.T, l ratelimit.Limiter, opts ...limitotel.Option) *limitotel.Limiter {
	t.Helper()
	w, err := limitotel.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// waitAsync runs l.Wait in a goroutine; its answer comes on the channel.
type answer struct {
	lease ratelimit.Lease
	err   error
}

func waitAsync(ctx context.Context, l ratelimit.Limiter, permits int) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		lease, err := l.Wait(ctx, permits)
		ch <- answer{lease, err}
	}()
	return ch
}

// A scripted sequence on a memory fixed window: grants, a refusal for each
// reason a memory limiter gives, errors, a queued waiter; every count exact.
func TestMemoryCounts(t *testing.T) {
	m := newMeter(t)
	// At a whole second, so that the window ends when the clock has moved a
	// second on: the waiter then queued exactly a second.
	clock := ratelimittest.NewClockAt(time.Now().Add(time.Hour).Truncate(time.Second))
	ctx := context.Background()
	cfg := fixedwindow.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 1}}
	// A Recorder of its own, which the limiter's Close does not unregister,
	// so that the counts can be read once it is closed.
	rec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m), limitotel.WithPolicy("api"),
		limitotel.WithConfig(cfg), limitotel.WithBackend("memory"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	l := rec.Wrap(mustMemory(t, cfg, clock))
	base := []string{"ratelimit.policy=api", "ratelimit.algorithm=fixedwindow", "ratelimit.backend=memory", "ratelimit.mode=enforce"}
	with := func(kv ...string) []string { return append(append([]string(nil), base...), kv...) }

	for i, wantGrant := range []bool{true, true, false} {
		if lease, err := l.Acquire(ctx, 1); err != nil || lease.Acquired() != wantGrant {
			t.Fatalf("acquire %d: %v, %v", i, lease, err)
		}
	}
	if lease, err := l.Acquire(ctx, 0); err != nil || lease.Acquired() { // a status check: not counted
		t.Fatalf("status check: %v, %v", lease, err)
	}
	waiter := waitAsync(ctx, l, 1)
	waitQueued(t, m, 1)
	check(t, m.collect(t), []want{{inQueue, nil, 0}})
	if lease, err := l.Wait(ctx, 1); err != nil || lease.Reason() != ratelimit.ReasonQueueFull {
		t.Fatalf("queue full: %v, %v", lease, err)
	}
	clock.Advance(time.Second)
	if a := <-waiter; a.err != nil || !a.lease.Acquired() {
		t.Fatalf("waiter: %v, %v", a.lease, a.err)
	}
	if lease, err := l.Acquire(ctx, 1); err != nil || !lease.Acquired() {
		t.Fatalf("after the window: %v, %v", lease, err)
	}
	dctx, cancel := context.WithDeadline(ctx, clock.Now().Add(time.Millisecond))
	if lease, err := l.Wait(dctx, 1); err != nil || lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("deadline: %v, %v", lease, err)
	}
	cancel()
	cctx, cancel := context.WithCancel(ctx)
	cancelled := waitAsync(cctx, l, 1)
	waitQueued(t, m, 1)
	cancel()
	if a := <-cancelled; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled while waiting: %v, %v", a.lease, a.err)
	}
	if _, err := l.Acquire(ctx, 3); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Wait(done, 1); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	closing := waitAsync(ctx, l, 1)
	waitQueued(t, m, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-closing; a.err != nil || a.lease.Reason() != ratelimit.ReasonClosed {
		t.Fatalf("closed while waiting: %v, %v", a.lease, a.err)
	}
	if _, err := l.Acquire(ctx, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatal(err)
	}

	check(t, m.collect(t), []want{
		{requests, with("ratelimit.result=acquired"), 4},
		{requests, with("ratelimit.result=refused", "ratelimit.reason=limit"), 1},
		{requests, with("ratelimit.result=refused", "ratelimit.reason=queue_full"), 1},
		{requests, with("ratelimit.result=refused", "ratelimit.reason=deadline"), 1},
		{requests, with("ratelimit.result=refused", "ratelimit.reason=closed"), 1},
		{requests, with("ratelimit.result=refused"), 4},
		{requests, with("ratelimit.result=error", "error.type=exceeds_limit"), 1},
		{requests, with("ratelimit.result=error", "error.type=invalid"), 1},
		{requests, with("ratelimit.result=error", "error.type=canceled"), 2},
		{requests, with("ratelimit.result=error", "error.type=closed"), 1},
		{requests, with("ratelimit.result=error"), 5},
		{requests, nil, 13},
		{permits, with(), 4},
		{queued, with(), 0},
		// Only the Waits that queued: not those refused at once (queue
		// full, deadline) nor the one whose ctx was done before the call.
		{inQueue, with("ratelimit.result=acquired"), 1},
		{inQueue, with("ratelimit.result=refused"), 1}, // closed
		{inQueue, with("ratelimit.result=error"), 1},   // cancelled while queued
		{active, nil, 0}, // not a concurrency limiter: no leases tracked
		{leaseDur, nil, 0},
		{backDur, nil, 0},
		{failures, nil, 0},
		{avail, nil, 0}, // a Recorder's Wrap: no Stats reported
	})
	// The waiter served when the clock moved a second on queued a second;
	// the others left at the instant they came (the clock stood still).
	checkSum(t, m.collect(t), inQueue, 1, 1, with("ratelimit.result=acquired")...)
	checkSum(t, m.collect(t), inQueue, 0, 0, with("ratelimit.result=refused")...)
}

// A NewestFirst queue evicts its oldest waiter: ReasonEvicted.
func TestMemoryEvicted(t *testing.T) {
	m := newMeter(t)
	clock := newClock()
	ctx := context.Background()
	cfg := tokenbucket.Config{Rate: 1, Burst: 1, Queue: ratelimit.Queue{Limit: 1, Order: ratelimit.NewestFirst}}
	l := mustNew(t, mustMemory(t, cfg, clock), limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	if lease, err := l.Acquire(ctx, 1); err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	first := waitAsync(ctx, l, 1)
	waitQueued(t, m, 1)
	second := waitAsync(ctx, l, 1)
	if a := <-first; a.err != nil || a.lease.Reason() != ratelimit.ReasonEvicted {
		t.Fatalf("first waiter: %v, %v", a.lease, a.err)
	}
	clock.Advance(time.Second)
	if a := <-second; a.err != nil || !a.lease.Acquired() {
		t.Fatalf("second waiter: %v, %v", a.lease, a.err)
	}
	check(t, m.collect(t), []want{
		{requests, []string{"ratelimit.policy=default", "ratelimit.algorithm=tokenbucket", "ratelimit.result=acquired"}, 2},
		{requests, []string{"ratelimit.result=refused", "ratelimit.reason=evicted"}, 1},
		{requests, nil, 3},
		{permits, nil, 2},
		{inQueue, nil, 2},
		{queued, nil, 0},
	})
}

// Concurrency leases: held, released, and the time they were held.
func TestConcurrencyLeases(t *testing.T) {
	m := newMeter(t)
	clock := newClock()
	ctx := context.Background()
	cfg := concurrency.Config{Limit: 1}
	inner := mustMemory(t, cfg, clock)
	l := mustNew(t, inner, limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	first, err := l.Acquire(ctx, 1)
	if err != nil || !first.Acquired() || first.Limit() != 1 {
		t.Fatal(first, err)
	}
	if lease, err := l.Acquire(ctx, 1); err != nil || lease.Acquired() {
		t.Fatal(lease, err)
	}
	waiter := waitAsync(ctx, l, 1)
	waitQueued(t, m, 1)
	check(t, m.collect(t), []want{{active, nil, 1}, {leaseDur, nil, 0}, {avail, nil, 0}})
	first.Release()
	first.Release() // idempotent: recorded once
	a := <-waiter
	if a.err != nil || !a.lease.Acquired() {
		t.Fatal(a.lease, a.err)
	}
	check(t, m.collect(t), []want{{active, nil, 1}, {queued, nil, 0}, {leaseDur, nil, 1}})
	if err := l.Refund(ctx, a.lease, 1); err != nil { // a concurrency refund is a release
		t.Fatal(err)
	}
	if st := inner.Stats(); st.Available != 1 {
		t.Fatalf("available %d after the refund", st.Available)
	}
	if il, _ := control.As[partitioned.Idler](l); il == nil {
		t.Fatal("no IdleFor through Unwrap")
	} else if _, ok := il.IdleFor(); !ok {
		t.Fatal("not idle once every lease is released")
	}
	check(t, m.collect(t), []want{
		{active, []string{"ratelimit.algorithm=concurrency", "ratelimit.backend=memory"}, 0},
		{avail, []string{"ratelimit.algorithm=concurrency", "ratelimit.backend=memory"}, 1},
		{leaseDur, nil, 2},
		{requests, []string{"ratelimit.result=acquired"}, 2},
		{requests, []string{"ratelimit.result=refused", "ratelimit.reason=limit"}, 1},
		{permits, nil, 2},
		{inQueue, []string{"ratelimit.result=acquired"}, 1},
	})
}

// Shadow mode grants everything and records exactly the refusals the
// wrapped limiter made, under ratelimit.mode "shadow".
func TestShadow(t *testing.T) {
	m := newMeter(t)
	clock := newClock()
	ctx := context.Background()
	cfg := fixedwindow.Config{Limit: 3, Window: time.Second}
	enforced := mustMemory(t, cfg, clock)
	defer enforced.Close()
	var mu sync.Mutex
	var reported []shadow.Refusal
	s, err := limitotel.Shadow(mustMemory(t, cfg, clock), func(_ context.Context, r shadow.Refusal) {
		mu.Lock()
		reported = append(reported, r)
		mu.Unlock()
	}, limitotel.WithMeterProvider(m), limitotel.WithPolicy("new-limit"), limitotel.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var grants, refusals int64
	for i := 0; i < 50; i++ {
		clock.Advance(time.Duration(i%7) * 50 * time.Millisecond)
		e, err := enforced.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if e.Acquired() {
			grants++
		} else {
			refusals++
		}
		var lease ratelimit.Lease
		if i%2 == 0 {
			lease, err = s.Acquire(ctx, 1)
		} else {
			lease, err = s.Wait(ctx, 1)
		}
		if err != nil || !lease.Acquired() {
			t.Fatalf("shadow refused: %v, %v", lease, err)
		}
	}
	if refusals == 0 || int64(len(reported)) != refusals {
		t.Fatalf("%d refusals reported, enforced made %d", len(reported), refusals)
	}
	shadowKV := []string{"ratelimit.policy=new-limit", "ratelimit.mode=shadow"}
	check(t, m.collect(t), []want{
		{requests, append(shadowKV, "ratelimit.result=acquired"), grants},
		{requests, append(shadowKV, "ratelimit.result=refused", "ratelimit.reason=limit"), refusals},
		{requests, []string{"ratelimit.mode=enforce"}, 0},
		{permits, shadowKV, grants},
	})
}

// A partitioned limiter: each partition wrapped (Recorder.ForKey), evicted
// when idle; the partitioned limiter's own refusals counted by WrapKeyed.
func TestPartitioned(t *testing.T) {
	m := newMeter(t)
	clock := newClock()
	ctx := context.Background()
	cfg := concurrency.Config{Limit: 1}
	f, err := memory.NewFactory(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m), limitotel.WithPolicy("per-user"),
		limitotel.WithConfig(cfg), limitotel.WithBackend("memory"))
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	p, err := partitioned.New(partitioned.Config{
		New:           parts.ForKey(f.ForKey),
		MaxPartitions: 1,
		IdleTimeout:   time.Second,
		Clock:         clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	keyedRec, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m), limitotel.WithPolicy("per-user-keyed"))
	if err != nil {
		t.Fatal(err)
	}
	defer keyedRec.Close()
	keyed := limitotel.WrapKeyed(keyedRec, p)
	defer keyed.Close()

	a, err := keyed.Acquire(ctx, "alice", 1)
	if err != nil || !a.Acquired() {
		t.Fatal(a, err)
	}
	if lease, err := keyed.Acquire(ctx, "bob", 1); err != nil || lease.Reason() != ratelimit.ReasonNoPartition {
		t.Fatal(lease, err)
	}
	check(t, m.collect(t), []want{
		{active, []string{"ratelimit.policy=per-user"}, 1},
		{requests, []string{"ratelimit.policy=per-user", "ratelimit.result=acquired"}, 1},
		{requests, []string{"ratelimit.policy=per-user"}, 1},
		{requests, []string{"ratelimit.policy=per-user-keyed", "ratelimit.result=acquired"}, 1},
		{requests, []string{"ratelimit.policy=per-user-keyed", "ratelimit.result=refused", "ratelimit.reason=no_partition"}, 1},
	})
	a.Release()
	for i := 0; i < 5 && p.Stats().Evicted == 0; i++ {
		clock.Advance(time.Second)
	}
	if p.Stats().Evicted != 1 {
		t.Fatalf("partition not evicted: %+v", p.Stats())
	}
	if lease, err := keyed.Acquire(ctx, "bob", 1); err != nil || !lease.Acquired() {
		t.Fatal(lease, err)
	}
	check(t, m.collect(t), []want{
		{active, []string{"ratelimit.policy=per-user"}, 1},
		{leaseDur, []string{"ratelimit.policy=per-user"}, 1},
		{requests, []string{"ratelimit.policy=per-user", "ratelimit.result=acquired"}, 2},
	})
}

// In a Chain, a wrapped limiter's grant that a later member refuses is
// refunded to the wrapped limiter.
func TestChainRefund(t *testing.T) {
	m := newMeter(t)
	clock := newClock()
	ctx := context.Background()
	inner := mustMemory(t, fixedwindow.Config{Limit: 2, Window: time.Hour}, clock)
	l := mustNew(t, inner, limitotel.WithMeterProvider(m))
	last := mustMemory(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)
	defer last.Close()
	chain := ratelimit.Chain(l, last)
	for i := 0; i < 3; i++ {
		chain.Acquire(ctx, 1)
	}
	if st := inner.Stats(); st.Available != 1 {
		t.Fatalf("available %d: the refused attempts were not refunded", st.Available)
	}
	wrappedChain := mustNew(t, ratelimit.Chain(mustMemory(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)), limitotel.WithMeterProvider(m), limitotel.WithPolicy("chain"))
	wrappedChain.Acquire(ctx, 1)
	check(t, m.collect(t), []want{
		{requests, []string{"ratelimit.policy=default", "ratelimit.backend=memory", "ratelimit.algorithm=unknown", "ratelimit.result=acquired"}, 3},
		{requests, []string{"ratelimit.policy=chain", "ratelimit.algorithm=chain", "ratelimit.backend=unknown"}, 1},
	})
}

// Recording a decision of a memory token bucket allocates nothing (a
// Wait, one context value).
func TestNoAllocation(t *testing.T) {
	m := newMeter(t)
	cfg := tokenbucket.Config{Rate: 1e12, Burst: 1 << 40}
	inner, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, inner, limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { l.Acquire(ctx, 1) }); n != 0 {
		t.Fatalf("%v allocations per instrumented Acquire", n)
	}
	// A Wait's ctx carries the Recorder's waittrace hooks: one context value.
	if n := testing.AllocsPerRun(1000, func() { l.Wait(ctx, 1) }); n > 1 {
		t.Fatalf("%v allocations per instrumented Wait, want at most 1", n)
	}
}

// A policy of the HTTP middleware in shadow mode: every request is served,
// the refusals the policy would make are counted, and no RateLimit header
// announces a policy that is not enforced.
func TestShadowMiddleware(t *testing.T) {
	m := newMeter(t)
	cfg := fixedwindow.Config{Limit: 2, Window: time.Hour}
	s, err := limitotel.Shadow(mustMemory(t, cfg, newClock()), nil,
		limitotel.WithMeterProvider(m), limitotel.WithPolicy("checkout"), limitotel.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mw, err := httplimit.Middleware(partitioned.Global(s), httplimit.Options{Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var policies []string
	for i := 0; i < 5; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		policies = append(policies, w.Header().Get("RateLimit-Policy"))
	}
	if policies[1] != "" || policies[2] != "" || policies[4] != "" {
		t.Fatalf("RateLimit-Policy headers %q", policies)
	}
	kv := []string{"ratelimit.policy=checkout", "ratelimit.mode=shadow"}
	check(t, m.collect(t), []want{
		{requests, append(kv, "ratelimit.result=acquired"), 2},
		{requests, append(kv, "ratelimit.result=refused", "ratelimit.reason=limit"), 3},
	})
}

// Goroutines deciding while the SDK collects: the counts are exact once
// they are done.
func TestConcurrentCounts(t *testing.T) {
	m := newMeter(t)
	ctx := context.Background()
	cfg := fixedwindow.Config{Limit: 1000, Window: time.Hour}
	clock := newClock()
	l := mustNew(t, mustMemory(t, cfg, clock), limitotel.WithMeterProvider(m), limitotel.WithConfig(cfg))
	// Waits refused at once when they would have to wait (the clock stands
	// still): never queued.
	wctx, cancel := context.WithDeadline(ctx, clock.Now().Add(time.Millisecond))
	defer cancel()
	const goroutines, calls = 4, 600
	var wg sync.WaitGroup
	stop := make(chan struct{})
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for {
			select {
			case <-stop:
				return
			default:
				m.collect(t)
			}
		}
	}()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				if i%2 == 0 {
					l.Acquire(ctx, 1)
				} else {
					l.Wait(wctx, 2)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-collected
	st, _ := control.Stats(l)
	check(t, m.collect(t), []want{
		{requests, nil, goroutines * calls},
		{requests, []string{"ratelimit.result=acquired"}, int64(st.Granted)},
		{requests, []string{"ratelimit.result=refused"}, int64(st.Refused)},
		{permits, nil, 1000 - st.Available},
		{inQueue, nil, 0},
		{queued, nil, 0},
		{avail, nil, st.Available},
	})
}
