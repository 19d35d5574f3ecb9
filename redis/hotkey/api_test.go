package hotkey

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
	"github.com/limitkit/ratelimit/waittrace"
)

// TestNewRefusesBadInput: every bad argument is an error naming it, and
// nothing is written to Redis.
func TestNewRefusesBadInput(t *testing.T) {
	c := server(t)
	fw := fixedwindow.Config{Limit: 10, Window: time.Second}
	cases := []struct {
		name   string
		client goredis.UniversalClient
		key    string
		cfg    ratelimit.Config
		opts   []Option
		want   error
		names  string // in the message
	}{
		{"nil client", nil, "k", fw, nil, ratelimit.ErrInvalidConfig, "nil client"},
		{"empty key", c, "", fw, nil, redis.ErrInvalidKey, `""`},
		{"key starting with }", c, "}x", fw, nil, redis.ErrInvalidKey, `"}x"`},
		{"long key", c, strings.Repeat("k", redis.MaxKeyLen+1), fw, nil, redis.ErrInvalidKey, "kkk"},
		{"brace in prefix", c, "k", fw, []Option{WithPrefix("a{")}, ratelimit.ErrInvalidConfig, `"a{"`},
		{"short expiry", c, "k", fw, []Option{WithExpiry(time.Microsecond)}, ratelimit.ErrInvalidConfig, "1µs"},
		{"long expiry", c, "k", fw, []Option{WithExpiry(time.Hour)}, ratelimit.ErrInvalidConfig, "1h0m0s"},
		{"share 0", c, "k", fw, []Option{WithShare(0)}, ratelimit.ErrInvalidConfig, "share 0"},
		{"share 1.5", c, "k", fw, []Option{WithShare(1.5)}, ratelimit.ErrInvalidConfig, "share 1.5"},
		{"invalid config", c, "k", fixedwindow.Config{Limit: 0, Window: time.Second}, nil, ratelimit.ErrInvalidConfig, "Limit"},
		{"nil config", c, "k", nil, nil, ratelimit.ErrInvalidConfig, "nil"},
		{"window of ns", c, "k", fixedwindow.Config{Limit: 1, Window: time.Second + 1}, nil, ratelimit.ErrInvalidConfig, "microseconds"},
		{"sliding window", c, "k", slidingwindow.Config{Limit: 10, Window: time.Second}, nil, ratelimit.ErrInvalidConfig, "slidingwindow.Config"},
		{"concurrency", c, "k", concurrency.Config{Limit: 10}, nil, ratelimit.ErrInvalidConfig, "concurrency.Config"},
	}
	for _, tc := range cases {
		l, err := New(tc.client, tc.key, tc.cfg, tc.opts...)
		if !errors.Is(err, tc.want) || l != nil {
			t.Errorf("%s: %v, %v; want %v", tc.name, l, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s: %q does not name %q", tc.name, err, tc.names)
		}
	}
	if n, _ := c.DBSize(bg).Result(); n != 0 {
		t.Errorf("%d keys written", n)
	}
}

// TestBadCallsChangeNothing: invalid permits, nil and done contexts fail
// with their sentinels, call nothing and change nothing.
func TestBadCallsChangeNothing(t *testing.T) {
	c := server(t)
	l, err := New(c, "bad", fixedwindow.Config{Limit: 5, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done, cancel := context.WithCancel(bg)
	cancel()
	for _, call := range []func(context.Context, int) (ratelimit.Lease, error){l.Acquire, l.Wait} {
		for _, tc := range []struct {
			ctx     context.Context
			permits int
			want    error
		}{{bg, -1, ratelimit.ErrInvalidPermits}, {bg, 6, ratelimit.ErrExceedsLimit}, {nil, 1, ratelimit.ErrNilContext}, {done, 1, context.Canceled}} {
			if lease, err := call(tc.ctx, tc.permits); !errors.Is(err, tc.want) || lease.Acquired() {
				t.Errorf("(%v, %d): %v %v; want %v", tc.ctx, tc.permits, lease, err, tc.want)
			}
		}
	}
	if l.Calls() != 0 {
		t.Errorf("%d script calls", l.Calls())
	}
	if lease, err := l.Acquire(bg, 5); err != nil || !lease.Acquired() {
		t.Errorf("the whole limit afterwards: %v %v", lease, err)
	}
}

// newFake returns a limiter of cfg on a fake clock, its time pinned.
func newFake(t *testing.T, c goredis.UniversalClient, key string, cfg ratelimit.Config, opts ...Option) (*Limiter, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock()
	l, err := New(c, key, cfg, append([]Option{WithClock(clock), WithExpiry(100 * ms), WithShare(0.5)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// remaining asks Redis for what is left on l's key, as another process.
func remaining(t *testing.T, l *Limiter, clock *ratelimittest.Clock) int64 {
	t.Helper()
	r, err := l.call(opPeek, 0, 0, "", giveBack{}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r.remaining
}

// demand makes l hold a lease: requests spread over 10ms, so that its
// recent demand asks for more than each request.
func demand(t *testing.T, l *Limiter, clock *ratelimittest.Clock) {
	t.Helper()
	for i := 0; i < 10; i++ {
		if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() {
			t.Fatalf("request %d: %v %v", i, lease, err)
		}
		clock.Advance(ms)
	}
	if b := l.cur.Load(); b == nil || b.left.Load() == 0 {
		t.Fatal("no lease held")
	}
}

// TestGiveBack: the unspent permits of a lease go back to Redis on Close,
// when the process is idle, and at three quarters of the expiry.
func TestGiveBack(t *testing.T) {
	c := server(t)
	cfg := fixedwindow.Config{Limit: 1000, Window: time.Hour}
	t.Run("close", func(t *testing.T) {
		l, clock := newFake(t, c, "close", cfg)
		demand(t, l, clock)
		if got := remaining(t, l, clock); got >= 990 {
			t.Fatalf("remaining %d with a lease held, want under 990", got)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := remaining(t, l, clock); got != 990 {
			t.Errorf("remaining %d after Close, want 990 (10 spent)", got)
		}
		if _, err := l.Acquire(bg, 1); !errors.Is(err, ratelimit.ErrClosed) {
			t.Errorf("Acquire after Close: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	t.Run("idle", func(t *testing.T) {
		l, clock := newFake(t, c, "idle", cfg)
		defer l.Close()
		demand(t, l, clock)
		clock.Advance(30 * ms) // past a quarter: noted
		if got := remaining(t, l, clock); got >= 990 {
			t.Fatalf("remaining %d, want the lease still held", got)
		}
		clock.Advance(30 * ms) // past half, nothing spent since: given back
		if got := remaining(t, l, clock); got != 990 {
			t.Errorf("remaining %d once idle, want 990", got)
		}
		if d, ok := l.IdleFor(); !ok || d < 60*ms {
			t.Errorf("IdleFor %v %v, want idle for 60ms at least", d, ok)
		}
	})
	t.Run("close waits for a give-back in flight", func(t *testing.T) {
		l, clock := newFake(t, c, "close-in-flight", cfg)
		demand(t, l, clock)
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		l.lag = func() { once.Do(func() { close(entered); <-release }) } // holds the next call
		clock.Advance(30 * ms)                                           // past a quarter: noted
		advanced := make(chan struct{})
		go func() { clock.Advance(30 * ms); close(advanced) }() // past half, idle: given back
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("no give-back began")
		}
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a give-back was in flight", err)
		case <-time.After(50 * ms):
		}
		close(release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		<-advanced
		if got := remaining(t, l, clock); got != 990 {
			t.Errorf("remaining %d after Close, want 990 (10 spent)", got)
		}
	})
	t.Run("expiry", func(t *testing.T) {
		l, clock := newFake(t, c, "expiry", cfg)
		defer l.Close()
		demand(t, l, clock)
		b := l.cur.Load()
		spent := int64(10)
		for clock.Now().Before(b.deadline.Add(-5 * ms)) { // a permit every 5ms: never idle
			clock.Advance(5 * ms)
			if lease, _ := l.Acquire(bg, 1); !lease.Acquired() {
				t.Fatal("refused")
			}
			spent++
		}
		if b.left.Load() >= 0 {
			t.Fatal("the lease is still spent 5ms before its deadline")
		}
		if _, ok := l.IdleFor(); ok {
			t.Error("IdleFor reports a limiter holding a lease idle")
		}
		// Its unspent permits came back: Redis lacks only what was spent
		// and what the lease that followed holds.
		if got, want := remaining(t, l, clock), 1000-spent-max(l.cur.Load().left.Load(), 0); got != want {
			t.Errorf("remaining %d, want %d", got, want)
		}
	})
}

// TestFailurePolicies: a request that needs Redis while it is down gets
// the policy's answer within the timeout; a live lease is spent meanwhile.
func TestFailurePolicies(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 50 * ms})
	defer c.Close()
	cfg := fixedwindow.Config{Limit: 1000, Window: time.Hour}
	fallback, _ := memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour})
	defer fallback.Close()
	var failures atomic.Int64
	count := WithOnFailure(func(error) { failures.Add(1) })
	policies := map[string]*Limiter{}
	for name, opt := range map[string]Option{"error": WithFailurePolicy(redis.FailError), "open": WithFailurePolicy(redis.FailOpen),
		"closed": WithFailurePolicy(redis.FailClosed), "fallback": WithFallback(fallback)} {
		l, clock := newFake(t, c, "fp-"+name, cfg, opt, count, WithTimeout(200*ms))
		defer l.Close()
		demand(t, l, clock)
		policies[name] = l
	}
	srv.Stop()
	for name, l := range policies {
		// The lease still serves.
		if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() {
			t.Errorf("%s: from the lease while Redis is down: %v %v", name, lease, err)
		}
		l.cur.Load().stop() // spent: the next request needs Redis
		start := time.Now()
		lease, err := l.Acquire(bg, 1)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: answered after %v", name, took)
		}
		switch name {
		case "error":
			if !errors.Is(err, redis.ErrUnavailable) {
				t.Errorf("error: %v %v", lease, err)
			}
		case "open":
			if err != nil || !lease.Acquired() || lease.Limit() != -1 {
				t.Errorf("open: %v %v", lease, err)
			}
		case "closed":
			if err != nil || lease.Acquired() || lease.Reason() != ratelimit.ReasonUnavailable {
				t.Errorf("closed: %v %v", lease, err)
			}
		case "fallback":
			next, err2 := l.Acquire(bg, 1)
			if err != nil || !lease.Acquired() || err2 != nil || next.Acquired() {
				t.Errorf("fallback: %v %v, then %v %v; want the fallback's grant, then its refusal", lease, err, next, err2)
			}
		}
	}
	if failures.Load() < 4 {
		t.Errorf("%d failures told, want at least one a policy", failures.Load())
	}
}

// TestRefusalRemembered: after a refusal, the process refuses locally
// until its RetryAfter (at most one expiry), without calling Redis.
func TestRefusalRemembered(t *testing.T) {
	c := server(t)
	l, clock := newFake(t, c, "refusal", fixedwindow.Config{Limit: 10, Window: time.Second})
	defer l.Close()
	for i := 0; i < 10; i++ {
		l.Acquire(bg, 1)
	}
	calls := l.Calls()
	lease, err := l.Acquire(bg, 1)
	if err != nil || lease.Acquired() {
		t.Fatalf("over the limit: %v %v", lease, err)
	}
	if d, ok := lease.RetryAfter(); !ok || d != time.Second {
		t.Errorf("RetryAfter %v %v, want 1s (the window's end)", d, ok)
	}
	for i := 0; i < 100; i++ {
		clock.Advance(ms / 2)
		if lease, _ := l.Acquire(bg, 1); lease.Acquired() {
			t.Fatal("granted over the limit")
		}
	}
	if n := l.Calls() - calls; n != 1 {
		t.Errorf("%d script calls for 101 refusals within one expiry, want 1", n)
	}
	clock.Advance(50 * ms) // past one expiry: asked again
	l.Acquire(bg, 1)
	if n := l.Calls() - calls; n != 2 {
		t.Errorf("%d script calls, want 2 once an expiry has passed", n)
	}
}

// TestWait: Wait sleeps until the RetryAfter, refuses at once what its
// deadline or the queue limit cannot wait for, and Close wakes it.
func TestWait(t *testing.T) {
	c := server(t)
	cfg := fixedwindow.Config{Limit: 2, Window: time.Second, Queue: ratelimit.Queue{Limit: 1}}
	l, clock := newFake(t, c, "wait", cfg)
	defer l.Close()
	l.Acquire(bg, 2)
	if lease, err := l.Wait(bg, 2); err != nil || lease.Reason() != ratelimit.ReasonQueueFull {
		t.Errorf("Wait over the queue limit: %v %v", lease, err)
	}
	short, cancel := context.WithDeadline(bg, clock.Now().Add(500*ms))
	defer cancel()
	if lease, err := l.Wait(short, 1); err != nil || lease.Reason() != ratelimit.ReasonDeadline {
		t.Errorf("Wait past its deadline: %v %v", lease, err)
	}
	got := make(chan ratelimit.Lease, 1)
	asleep := &observer{queued: make(chan struct{}, 1)}
	go func() {
		lease, err := l.Wait(asleep.ctx(), 1)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	<-asleep.queued
	clock.Advance(time.Second + 100*ms) // the next window, and the jitter
	if lease := <-got; !lease.Acquired() {
		t.Errorf("Wait after the window: %v", lease)
	}
	l.Acquire(bg, 1)
	go func() {
		lease, _ := l.Wait(asleep.ctx(), 1)
		got <- lease
	}()
	<-asleep.queued
	l.Close()
	if lease := <-got; lease.Reason() != ratelimit.ReasonClosed {
		t.Errorf("Wait woken by Close: %v", lease)
	}
}

// observer tells of a Wait that goes to sleep.
type observer struct{ queued chan struct{} }

// ctx is a ctx whose waittrace hooks tell o.
func (o *observer) ctx() context.Context {
	return waittrace.WithHooks(bg, &waittrace.Hooks{Queued: func(context.Context, int) { o.queued <- struct{}{} }})
}

// TestFigures: a grant's Remaining is the lease's plus Redis's; a status
// check takes nothing; an unlimited bucket never calls Redis.
func TestFigures(t *testing.T) {
	c := server(t)
	l, clock := newFake(t, c, "figures", fixedwindow.Config{Limit: 1000, Window: time.Hour})
	defer l.Close()
	demand(t, l, clock)
	b := l.cur.Load()
	lease, _ := l.Acquire(bg, 1)
	if want := b.left.Load() + b.shared; lease.Remaining() != want || lease.Limit() != 1000 {
		t.Errorf("Remaining %d Limit %d, want %d (lease %d + Redis %d) of 1000", lease.Remaining(), lease.Limit(), want, b.left.Load(), b.shared)
	}
	left := b.left.Load()
	if lease, _ := l.Acquire(bg, 0); !lease.Acquired() || b.left.Load() != left {
		t.Errorf("status check: %v, took %d", lease, left-b.left.Load())
	}
	inf, err := New(c, "inf", tokenbucket.Config{Rate: rate.Inf, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if lease, _ := inf.Acquire(bg, 1000); !lease.Acquired() || lease.Limit() != -1 || inf.Calls() != 0 {
		t.Errorf("unlimited: %v, %d calls", lease, inf.Calls())
	}
}

// TestContract runs ratelimittest's contract on limiters of each
// algorithm whose leases may hold the whole limit. It waits on the real
// clock, beside the other tests.
func TestContract(t *testing.T) {
	t.Parallel()
	c := server(t)
	var n atomic.Int64
	for _, mk := range []func(int64) ratelimit.Config{
		func(c int64) ratelimit.Config { return tokenbucket.Config{Rate: 10, Burst: int(c)} },
		func(c int64) ratelimit.Config { return fixedwindow.Config{Limit: int(c), Window: 300 * ms} },
		func(c int64) ratelimit.Config { return slidinglog.Config{Limit: int(c), Window: 300 * ms} },
	} {
		err := ratelimittest.TestLimiter(func(capacity int64) ratelimit.Limiter {
			l, err := New(c, "contract-"+strconv.FormatInt(n.Add(1), 10), mk(capacity), WithShare(1), WithExpiry(50*ms))
			if err != nil {
				t.Fatal(err)
			}
			return l
		})
		if err != nil {
			t.Errorf("%T: %v", mk(1), err)
		}
	}
}

// TestLoweredBurst: a key moved from Burst 1000 to Burst 100 (a rolling
// deploy) grants at most 100 at one instant, with or without a lease
// taken first: the stored tokens are capped at the new burst, as the
// exact limiter's are.
func TestLoweredBurst(t *testing.T) {
	for _, leased := range []bool{false, true} {
		c, key := server(t), "lowered-"+strconv.FormatBool(leased)
		clock := ratelimittest.NewClock()
		old, err := New(c, key, tokenbucket.Config{Rate: 1, Burst: 1000}, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		if lease, _ := old.Acquire(bg, 1); !lease.Acquired() {
			t.Fatal("the first grant was refused")
		}
		old.Close()
		l, err := New(c, key, tokenbucket.Config{Rate: 1, Burst: 100}, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if leased { // a take with a lease, as a busy process makes
			r, err := l.call(opTake, 1, 26, "x", giveBack{}, clock.Now())
			if err != nil || !r.granted {
				t.Fatal(r, err)
			}
			n += int(r.k) // the permit taken, and those the lease holds
		}
		for range 300 {
			if lease, _ := l.Acquire(bg, 1); lease.Acquired() {
				n++
			}
		}
		l.Close()
		if n > 100 {
			t.Errorf("leased %v: %d granted (or leased) at one instant under Burst 100", leased, n)
		}
	}
}

// A time pinned behind the server's (a test's clock at a past date): the
// shared state and the leases must not expire at once by the server's
// clock, which Redis expires keys by. Two processes over one limit of 5,
// each asking 8 times, get 5 grants in all.
func TestPinnedTimeBehindTheServer(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	clock := ratelimittest.NewClockAt(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	granted := 0
	for range 2 {
		l, err := New(c, "past", fixedwindow.Config{Limit: 5, Window: time.Minute}, WithClock(clock), WithExpiry(100*ms), WithShare(0.5))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for range 8 {
			if lease, err := l.Acquire(bg, 1); err != nil {
				t.Fatal(err)
			} else if lease.Acquired() {
				granted++
			}
		}
	}
	if granted != 5 {
		t.Fatalf("%d of 16 granted under a limit of 5", granted)
	}
}
