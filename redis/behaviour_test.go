package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

var bg = context.Background()

// counter is a go-redis hook counting the commands sent.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func mustNew(t *testing.T, c goredis.UniversalClient, key string, cfg ratelimit.Config, opts ...redis.Option) *redis.Limiter {
	t.Helper()
	l, err := redis.New(c, key, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestKeysAreValidatedBeforeAnyCall(t *testing.T) {
	_, c := miniClient(t)
	var n counter
	c.AddHook(&n)
	cfg := fixedwindow.Config{Limit: 1, Window: time.Second}
	for _, key := range []string{"", strings.Repeat("k", redis.MaxKeyLen+1), "}x"} {
		if _, err := redis.New(c, key, cfg); !errors.Is(err, redis.ErrInvalidKey) {
			t.Errorf("key %.20q (%d bytes): %v, want ErrInvalidKey", key, len(key), err)
		}
	}
	if _, err := redis.New(c, "k", cfg, redis.WithPrefix("app{1}:")); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("a prefix with a hash tag: %v, want ErrInvalidConfig", err)
	}
	for _, key := range []string{"k", strings.Repeat("k", redis.MaxKeyLen), "x}", "{x}"} {
		if _, err := redis.New(c, key, cfg); err != nil {
			t.Errorf("key %.20q (%d bytes): %v", key, len(key), err)
		}
	}
	if _, err := redis.New(c, "k", fixedwindow.Config{Limit: 1, Window: time.Second + time.Nanosecond}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("window of 1s+1ns: %v, want ErrInvalidConfig (not whole microseconds)", err)
	}
	if _, err := redis.New(c, "k", fixedwindow.Config{Limit: 0, Window: time.Second}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("limit 0: %v, want ErrInvalidConfig", err)
	}
	l := mustNew(t, c, strings.Repeat("k", redis.MaxKeyLen), cfg)
	if _, err := l.Acquire(bg, 2); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("Acquire(2): %v", err)
	}
	if _, err := l.Acquire(bg, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Errorf("Acquire(-1): %v", err)
	}
	if got := n.n.Load(); got != 0 {
		t.Fatalf("%d commands sent for invalid keys, configs and permits, want 0", got)
	}
}

// TestKeysExpireWhenInitial: every key's TTL is the time until its state is
// initial again, and keys share one hash slot.
func TestKeysExpireWhenInitial(t *testing.T) {
	m, c := miniClient(t)
	clock := ratelimittest.NewClock()
	clock.Advance(40 * time.Second) // to a whole minute: windows start now
	m.SetTime(clock.Now())          // Redis's clock, which expires keys, reads the same
	for _, tc := range []struct {
		cfg  ratelimit.Config
		keys []string
		ttl  time.Duration
	}{
		{fixedwindow.Config{Limit: 5, Window: time.Minute}, []string{"ratelimit:{fw}:fw"}, time.Minute},
		{tokenbucket.Config{Rate: 1, Burst: 10}, []string{"ratelimit:{tb}:tb"}, 3 * time.Second},
		{slidingwindow.Config{Limit: 5, Window: time.Minute, Segments: 6}, []string{"ratelimit:{sws}:sgc", "ratelimit:{sws}:sgc:m"}, time.Minute},
		{slidingwindow.Config{Limit: 5, Window: time.Minute}, []string{"ratelimit:{sww}:sw"}, 2 * time.Minute},
		{slidinglog.Config{Limit: 5, Window: time.Minute}, []string{"ratelimit:{sl}:slc", "ratelimit:{sl}:slc:m"}, time.Minute},
		{concurrency.Config{Limit: 5}, []string{"ratelimit:{cc}:cc", "ratelimit:{cc}:cc:n"}, 30 * time.Second},
	} {
		key, _, _ := strings.Cut(strings.TrimPrefix(tc.keys[0], "ratelimit:{"), "}")
		l := mustNew(t, c, key, tc.cfg, redis.WithClock(clock))
		lease, err := l.Acquire(bg, 3)
		if err != nil || !lease.Acquired() {
			t.Fatalf("%s: %v %v", key, lease, err)
		}
		for _, k := range tc.keys {
			if !m.Exists(k) {
				t.Fatalf("%s: key %q missing; keys: %v", key, k, m.Keys())
			}
			if ttl := m.TTL(k); ttl != tc.ttl {
				t.Errorf("%s: TTL of %q = %v, want %v", key, k, ttl, tc.ttl)
			}
		}
		lease.Release()
	}
	// Once the state is initial the keys are gone: nothing is kept for idle keys.
	m.FastForward(2 * time.Minute)
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys left after every state became initial: %v", keys)
	}
	// A concurrency release deletes the keys at once.
	l := mustNew(t, c, "cc2", concurrency.Config{Limit: 1})
	lease, _ := l.Acquire(bg, 1)
	lease.Release()
	lease.Release()
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys left after the only lease was released: %v", keys)
	}
}

func TestOneRoundTripPerDecision(t *testing.T) {
	c := realClient(t)
	var n counter
	c.AddHook(&n)
	for _, cfg := range []ratelimit.Config{ // limits that all 51 calls fit in: every call goes to Redis
		tokenbucket.Config{Rate: 1000, Burst: 100}, fixedwindow.Config{Limit: 100, Window: time.Minute},
		slidingwindow.Config{Limit: 100, Window: time.Minute, Segments: 10}, slidingwindow.Config{Limit: 100, Window: time.Minute},
		slidinglog.Config{Limit: 100, Window: time.Minute}, concurrency.Config{Limit: 1000},
	} {
		// A key of its own: a sliding window's two forms share their state.
		l := mustNew(t, c, fmt.Sprintf("rt-%d", keySeq.Add(1)), cfg)
		l.Acquire(bg, 1) // loads the script: EVALSHA, then EVAL
		before := n.n.Load()
		for i := 0; i < 50; i++ {
			if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() {
				t.Fatalf("%T: Acquire %d: %v %v", cfg, i, lease, err)
			}
		}
		if got := n.n.Load() - before; got != 50 {
			t.Errorf("%T: %d commands for 50 Acquire calls, want 50", cfg, got)
		}
	}
}

// TestConcurrentDecisionsShareScriptCalls: concurrent decisions of one
// limiter are batched, so they cost fewer script calls than decisions, and
// every one of them is still decided (all fit in the limit).
func TestConcurrentDecisionsShareScriptCalls(t *testing.T) {
	c := realClient(t)
	const goroutines, each = 64, 20
	l := mustNew(t, c, "batched", fixedwindow.Config{Limit: goroutines * each, Window: time.Hour})
	l.Acquire(bg, 0) // loads the script
	var n counter
	c.AddHook(&n)
	var granted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if lease, err := l.Acquire(bg, 1); err == nil && lease.Acquired() {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() != goroutines*each {
		t.Fatalf("granted %d of %d", granted.Load(), goroutines*each)
	}
	if calls := n.n.Load(); calls >= goroutines*each {
		t.Fatalf("%d script calls for %d concurrent decisions: not batched", calls, goroutines*each)
	} else {
		t.Logf("%d script calls for %d decisions", calls, goroutines*each)
	}
}

// TestOnlyRedisTimeCounts: the client's clock is never used. Redis (here
// miniredis) runs half an hour into an hour-long window while this process
// reads a different time: RetryAfter follows Redis's time.
func TestOnlyRedisTimeCounts(t *testing.T) {
	m, c := miniClient(t)
	redisNow := time.Now().Add(-time.Hour).Truncate(time.Hour).Add(30 * time.Minute) // an hour off, mid-window
	m.SetTime(redisNow)
	l := mustNew(t, c, "skew", fixedwindow.Config{Limit: 1, Window: time.Hour})
	l.Acquire(bg, 1)
	lease, err := l.Acquire(bg, 1)
	if d, ok := lease.RetryAfter(); err != nil || !ok || d != 30*time.Minute {
		t.Fatalf("RetryAfter = %v, %v, %v; want 30m from Redis's clock", d, ok, err)
	}
}

func TestWaitTokenBucketReservesAcrossProcesses(t *testing.T) {
	_, c1 := miniClient(t)
	c2 := goredis.NewClient(&goredis.Options{Addr: c1.Options().Addr}) // a second process's pool
	defer c2.Close()
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 10, Burst: 2, Queue: ratelimit.Queue{Limit: 4}}
	a := mustNew(t, c1, "tbw", cfg, redis.WithClock(clock))
	b := mustNew(t, c2, "tbw", cfg, redis.WithClock(clock))
	a.Acquire(bg, 2)
	type res struct {
		name string
		l    ratelimit.Lease
		err  error
	}
	order := make(chan res, 2)
	wait := func(name string, l *redis.Limiter, pending int) {
		go func() {
			lease, err := l.Wait(bg, 2)
			order <- res{name, lease, err}
		}()
		waitTimers(t, clock, pending)
	}
	wait("a", a, 1) // reserves 2 tokens: due in 200ms
	wait("b", b, 2) // reserves 2 more: due in 400ms
	if lease, _ := a.Wait(bg, 1); lease.Acquired() || lease.Reason() != ratelimit.ReasonQueueFull {
		t.Fatalf("a fifth reserved token: %v, want ReasonQueueFull (debt beyond Queue.Limit)", lease)
	}
	clock.Advance(200 * time.Millisecond)
	if r := <-order; r.name != "a" || !r.l.Acquired() {
		t.Fatalf("first served: %s %v %v, want a granted", r.name, r.l, r.err)
	}
	clock.Advance(200 * time.Millisecond)
	if r := <-order; r.name != "b" || !r.l.Acquired() {
		t.Fatalf("second served: %s %v %v, want b granted", r.name, r.l, r.err)
	}
	// A deadline before the tokens arrive is refused at once, changing nothing.
	ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Millisecond))
	defer cancel()
	lease, err := a.Wait(ctx, 2)
	if d, _ := lease.RetryAfter(); err != nil || lease.Reason() != ratelimit.ReasonDeadline || d != 200*time.Millisecond {
		t.Fatalf("Wait with 1ms left: %v (retry %v) %v; want ReasonDeadline, retry 200ms", lease, d, err)
	}
	// A cancelled reservation refunds its tokens.
	ctx2, cancel2 := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { _, err := a.Wait(ctx2, 2); done <- err }()
	waitTimers(t, clock, 1)
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v", err)
	}
	clock.Advance(200 * time.Millisecond)
	if lease, _ := a.Acquire(bg, 2); !lease.Acquired() {
		t.Fatalf("after the refund and 200ms, Acquire(2) = %v, want granted", lease)
	}
}

func TestWaitWindowSleepsAndRetries(t *testing.T) {
	_, c := miniClient(t)
	clock := ratelimittest.NewClock()
	l := mustNew(t, c, "fww", fixedwindow.Config{Limit: 1, Window: time.Second, Queue: ratelimit.Queue{Limit: 1}}, redis.WithClock(clock))
	l.Acquire(bg, 1)
	done := make(chan ratelimit.Lease, 1)
	go func() { lease, _ := l.Wait(bg, 1); done <- lease }()
	waitTimers(t, clock, 1)
	clock.Advance(1100 * time.Millisecond) // RetryAfter plus at most 10% jitter
	if lease := <-done; !lease.Acquired() {
		t.Fatalf("Wait after the window: %v", lease)
	}
	// The zero Queue waits too: a deadline before the window's end is
	// refused at once (ReasonDeadline), and a later one is granted.
	noq := mustNew(t, c, "fwq", fixedwindow.Config{Limit: 2, Window: time.Second}, redis.WithClock(clock))
	noq.Acquire(bg, 2)
	short, cancel := context.WithDeadline(bg, clock.Now().Add(500*time.Millisecond))
	defer cancel()
	if lease, _ := noq.Wait(short, 1); lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with the zero Queue and a short deadline: %v, want ReasonDeadline", lease)
	}
	go func() { lease, _ := noq.Wait(bg, 1); done <- lease }()
	waitTimers(t, clock, 1)
	clock.Advance(1100 * time.Millisecond)
	if lease := <-done; !lease.Acquired() {
		t.Fatalf("Wait with the zero Queue, after the window: %v", lease)
	}
	// More permits than Queue.Limit are refused at once.
	q1 := mustNew(t, c, "fwq1", fixedwindow.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 1}}, redis.WithClock(clock))
	q1.Acquire(bg, 2)
	if lease, _ := q1.Wait(bg, 2); lease.Reason() != ratelimit.ReasonQueueFull {
		t.Fatalf("Wait(2) with Queue.Limit 1: %v, want ReasonQueueFull", lease)
	}
	// Close wakes a sleeping waiter.
	if lease, _ := l.Acquire(bg, 1); !lease.Acquired() {
		t.Fatalf("Acquire in a new window: %v", lease)
	}
	go func() { lease, _ := l.Wait(bg, 1); done <- lease }()
	waitTimers(t, clock, 1)
	l.Close()
	if lease := <-done; lease.Reason() != ratelimit.ReasonClosed {
		t.Fatalf("waiter at Close: %v, want ReasonClosed", lease)
	}
	if _, err := l.Acquire(bg, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

// TestConcurrencyHolderExpiry: a holder that stops renewing (a crashed
// process) loses its permits after the lease TTL; a live one keeps them.
func TestConcurrencyHolderExpiry(t *testing.T) {
	c := realClient(t)
	const ttl = 300 * time.Millisecond
	crashed := mustNew(t, c, "cx", concurrency.Config{Limit: 2}, redis.WithLeaseTTL(ttl))
	live := mustNew(t, c, "cx", concurrency.Config{Limit: 2}, redis.WithLeaseTTL(ttl))
	if l, _ := crashed.Acquire(bg, 1); !l.Acquired() {
		t.Fatal("crashed: not granted")
	}
	crashed.Close() // Close releases its lease; the crash is simulated below
	held, _ := live.Acquire(bg, 1)
	// Simulate the crash: a holder entry that nobody renews.
	c.ZAdd(bg, "ratelimit:{cx}:cc", goredis.Z{Score: float64(time.Now().Add(ttl).UnixMicro()), Member: "dead 1"})
	c.IncrBy(bg, "ratelimit:{cx}:cc:n", 1)
	if l, _ := live.Acquire(bg, 1); l.Acquired() {
		t.Fatal("granted a third permit while two are held")
	}
	time.Sleep(2 * ttl) // the live lease is renewed every ttl/3; the dead one expires
	if l, _ := live.Acquire(bg, 1); !l.Acquired() {
		t.Fatalf("the crashed holder's permit did not come back after its TTL: %v", l)
	} else {
		l.Release()
	}
	if s := live.Stats(); s.Available != 1 {
		t.Fatalf("Stats after expiry: %+v, want 1 available (the live lease still held)", s)
	}
	held.Release()
}

// TestConcurrencyWaitWakesOnRelease measures how soon a waiting process sees
// a release made by another (polling with backoff, 1ms doubling to 50ms).
func TestConcurrencyWaitWakesOnRelease(t *testing.T) {
	c := realClient(t)
	cfg := concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}
	a := mustNew(t, c, "cw", cfg)
	b := mustNew(t, c, "cw", cfg)
	held, _ := a.Acquire(bg, 1)
	got := make(chan time.Time, 1)
	go func() {
		lease, err := b.Wait(bg, 1)
		if err != nil || !lease.Acquired() {
			t.Errorf("Wait: %v %v", lease, err)
		}
		got <- time.Now()
		lease.Release()
	}()
	time.Sleep(30 * time.Millisecond)
	released := time.Now()
	held.Release()
	delay := (<-got).Sub(released)
	t.Logf("wake-up delay after a release in another process: %v", delay)
	if delay > time.Second {
		t.Fatalf("waiter woke %v after the release", delay)
	}
}

func TestScriptFlushIsInvisible(t *testing.T) {
	c := realClient(t)
	l := mustNew(t, c, "flush", fixedwindow.Config{Limit: 100, Window: time.Minute})
	for i := 0; i < 10; i++ {
		if i == 5 {
			c.ScriptFlush(bg)
		}
		if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() {
			t.Fatalf("Acquire %d: %v %v", i, lease, err)
		}
	}
}

// TestRefusalCache: with the cache (the default) a flood on an over-limit
// key reaches Redis about once per RetryAfter, and every decision and
// RetryAfter equals what Redis answers without the cache.
func TestRefusalCache(t *testing.T) {
	_, c := miniClient(t)
	var n counter
	c.AddHook(&n)
	clock := ratelimittest.NewClock()
	cfg := fixedwindow.Config{Limit: 3, Window: time.Second}
	cached := mustNew(t, c, "flood", cfg, redis.WithClock(clock))
	plain := mustNew(t, c, "flood-plain", cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
	for step := 0; step < 2000; step++ {
		clock.Advance(time.Millisecond)
		p := 1 + step%2
		a, err1 := cached.Acquire(bg, p)
		b, err2 := plain.Acquire(bg, p)
		da, _ := a.RetryAfter()
		db, _ := b.RetryAfter()
		if err1 != nil || err2 != nil || a.Acquired() != b.Acquired() || da != db {
			t.Fatalf("step %d: cached %v (%v) %v, plain %v (%v) %v", step, a, da, err1, b, db, err2)
		}
	}
	clock.Advance(time.Second)                        // a window nobody used
	if l, _ := cached.Acquire(bg, 3); !l.Acquired() { // take it all
		t.Fatalf("Acquire(3) at a window's start: %v", l)
	}
	before := n.n.Load()
	for i := 0; i < 10000; i++ { // a flood within one window: all refused locally
		if l, _ := cached.Acquire(bg, 1); l.Acquired() {
			t.Fatal("granted in an exhausted window")
		}
	}
	if calls := n.n.Load() - before; calls > 1 {
		t.Fatalf("%d Redis calls for 10,000 refusals in one window, want at most 1", calls)
	}
}

// TestRefusalCacheSeesOtherProcesses: what another process does to a key
// that gives permits back (here a Reset, as an admin's reset of a user) is
// seen by a process that cached a refusal of that key within a second, not
// at the refusal's RetryAfter (1,000 s here); until then the cache keeps
// answering locally, with the refusal's own RetryAfter.
func TestRefusalCacheSeesOtherProcesses(t *testing.T) {
	_, c := miniClient(t)
	var n counter
	c.AddHook(&n)
	clock := ratelimittest.NewClock()
	cfg := fixedwindow.Config{Limit: 1, Window: 1000 * time.Second} // the clock starts at a window's start
	key := "reset-elsewhere"
	here, elsewhere := mustNew(t, c, key, cfg, redis.WithClock(clock)), mustNew(t, c, key, cfg, redis.WithClock(clock))
	if g, err := here.Acquire(bg, 1); err != nil || !g.Acquired() {
		t.Fatalf("first Acquire: %v, %v", g, err)
	}
	if r, err := here.Acquire(bg, 1); err != nil || r.Acquired() {
		t.Fatalf("second Acquire: %v, %v; want refused", r, err)
	}
	if err := elsewhere.Reset(bg); err != nil {
		t.Fatal(err)
	}
	clock.Advance(999 * time.Millisecond)
	before := n.n.Load()
	r, err := here.Acquire(bg, 1)
	if d, ok := r.RetryAfter(); err != nil || r.Acquired() || !ok || d != cfg.Window-999*time.Millisecond {
		t.Fatalf("within the second: %v (%v), %v; want refused from the cache, RetryAfter %v", r, d, err, cfg.Window-999*time.Millisecond)
	}
	if calls := n.n.Load() - before; calls != 0 {
		t.Fatalf("%d Redis calls within the second, want 0 (the cached refusal)", calls)
	}
	clock.Advance(time.Millisecond)
	if g, err := here.Acquire(bg, 1); err != nil || !g.Acquired() {
		t.Fatalf("a second after the refusal: %v, %v; want granted (the key was reset elsewhere)", g, err)
	}
}

// TestClosedRefusesEveryCall: after Close, Reconfigure and Refund return
// ratelimit.ErrClosed as the other calls do, and a Reconfigure of a closed
// limiter leaves the limiters of its Factory as they were.
func TestClosedRefusesEveryCall(t *testing.T) {
	_, c := miniClient(t)
	for _, tc := range []struct {
		name       string
		cfg, other ratelimit.Config
	}{
		{"fixedwindow", fixedwindow.Config{Limit: 3, Window: time.Minute}, fixedwindow.Config{Limit: 7, Window: time.Minute}},
		{"concurrency", concurrency.Config{Limit: 3}, concurrency.Config{Limit: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := redis.NewFactory(c, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			closed, err := f.New("closed-" + tc.name)
			if err != nil {
				t.Fatal(err)
			}
			sibling, err := f.New("sibling-" + tc.name)
			if err != nil {
				t.Fatal(err)
			}
			defer sibling.Close()
			g, err := closed.Acquire(bg, 1)
			if err != nil || !g.Acquired() {
				t.Fatalf("Acquire: %v, %v", g, err)
			}
			closed.Close()
			if err := closed.Reconfigure(tc.other); !errors.Is(err, ratelimit.ErrClosed) {
				t.Errorf("Reconfigure after Close: %v, want ErrClosed", err)
			}
			if s, err := sibling.Acquire(bg, 0); err != nil || s.Limit() != tc.cfg.Capacity() {
				t.Errorf("sibling after the closed one's Reconfigure: %v, %v; want the old limit %d", s, err, tc.cfg.Capacity())
			}
			if err := closed.Refund(bg, g, 1); !errors.Is(err, ratelimit.ErrClosed) {
				t.Errorf("Refund after Close: %v, want ErrClosed", err)
			}
			if err := closed.Reset(bg); !errors.Is(err, ratelimit.ErrClosed) {
				t.Errorf("Reset after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// A test may pin the time behind the server's (redis.WithClock over
// ratelimittest.NewClockAt of a past date): the states must not expire at
// once by the server's clock, which Redis expires keys by. Each limit of
// 5 grants 5 of 8 requests, as in memory, on miniredis and on Redis.
func TestPinnedTimeBehindTheServer(t *testing.T) {
	_, mini := miniClient(t)
	for name, c := range map[string]goredis.UniversalClient{"miniredis": mini, "redis": realClient(t)} {
		for _, cfg := range []ratelimit.Config{
			tokenbucket.Config{Rate: 1, Burst: 5}, fixedwindow.Config{Limit: 5, Window: time.Minute},
			slidingwindow.Config{Limit: 5, Window: time.Minute, Segments: 10}, slidingwindow.Config{Limit: 5, Window: time.Minute},
			slidinglog.Config{Limit: 5, Window: time.Minute}, concurrency.Config{Limit: 5},
		} {
			clock := ratelimittest.NewClockAt(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
			l := mustNew(t, c, key("past"), cfg, redis.WithClock(clock))
			granted := 0
			for range 8 {
				if lease, err := l.Acquire(bg, 1); err != nil {
					t.Fatalf("%s, %T: %v", name, cfg, err)
				} else if lease.Acquired() {
					granted++
				}
			}
			if granted != 5 {
				t.Errorf("%s, %T: %d of 8 granted under a limit of 5", name, cfg, granted)
			}
		}
	}
}
