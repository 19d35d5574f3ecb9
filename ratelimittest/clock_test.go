package ratelimittest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/ratelimittest"
)

// bound is how long a test waits for what must happen before it fails.
const bound = 5 * time.Second

// waitFor starts clock.WaitForTimers(ctx, n) and returns the channel its
// error arrives on.
func waitFor(ctx context.Context, clock *ratelimittest.Clock, n int) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- clock.WaitForTimers(ctx, n) }()
	return ch
}

// watchedCtx pokes blocked when Done is called: WaitForTimers calls it to
// block, once it has looked at the timers.
type watchedCtx struct {
	context.Context
	blocked chan struct{}
}

func (c watchedCtx) Done() <-chan struct{} {
	select {
	case c.blocked <- struct{}{}:
	default:
	}
	return c.Context.Done()
}

// waitBlocked starts clock.WaitForTimers(ctx, n) and returns, with the
// channel its error arrives on, once it blocks (or has returned).
func waitBlocked(t *testing.T, ctx context.Context, clock *ratelimittest.Clock, n int) <-chan error {
	t.Helper()
	w := watchedCtx{ctx, make(chan struct{}, 1)}
	ch := make(chan error, 1)
	go func() { ch <- clock.WaitForTimers(w, n) }()
	select {
	case <-w.blocked:
	case err := <-ch:
		ch <- err
	case <-time.After(bound):
		t.Fatalf("WaitForTimers(%d) neither blocked nor returned within %v", n, bound)
	}
	return ch
}

// answer returns what arrives on ch, failing t after bound.
func answer(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(bound):
		t.Fatalf("WaitForTimers did not return within %v", bound)
		return nil
	}
}

// sleep blocks until clock reaches its time now plus d, like a limiter's
// Wait asleep on its clock.
func sleep(clock *ratelimittest.Clock, d time.Duration) {
	done := make(chan struct{})
	clock.AfterFunc(d, func() { close(done) })
	<-done
}

// A test waits for its goroutines to be asleep, then wakes them all.
func TestWaitForTimersSleepers(t *testing.T) {
	clock := ratelimittest.NewClock()
	const n = 50
	asleep := waitBlocked(t, context.Background(), clock, n)
	var wg sync.WaitGroup
	woke := make(chan time.Time, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sleep(clock, time.Duration(i+1)*time.Millisecond)
			woke <- clock.Now()
		}()
	}
	if err := answer(t, asleep); err != nil {
		t.Fatalf("WaitForTimers(%d) with %d goroutines going to sleep: %v", n, n, err)
	}
	if p := clock.Pending(); p != n {
		t.Fatalf("Pending() = %d after WaitForTimers(%d), want %d", p, n, n)
	}
	if len(woke) != 0 {
		t.Fatalf("a sleeper woke before the clock moved")
	}
	clock.Advance(n * time.Millisecond)
	wg.Wait()
	if len(woke) != n {
		t.Fatalf("%d of %d sleepers woke", len(woke), n)
	}
}

// It returns once the n-th timer is set, after changes that leave fewer.
func TestWaitForTimersReturnsOnceNPending(t *testing.T) {
	clock := ratelimittest.NewClock()
	ch := waitBlocked(t, context.Background(), clock, 3)
	stop := clock.AfterFunc(time.Second, func() {})
	clock.AfterFunc(2*time.Second, func() {})
	stop()
	clock.AfterFunc(time.Millisecond, func() {})
	clock.Advance(time.Millisecond) // runs the last one: 1 pending
	clock.AfterFunc(time.Second, func() {})
	clock.AfterFunc(3*time.Second, func() {}) // 3 pending
	if err := answer(t, ch); err != nil {
		t.Fatalf("WaitForTimers(3) once 3 timers are pending: %v, want nil", err)
	}
}

// It returns nil at once when n timers are pending already, whatever ctx.
func TestWaitForTimersAlreadyPending(t *testing.T) {
	clock := ratelimittest.NewClock()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := answer(t, waitFor(done, clock, 0)); err != nil {
		t.Fatalf("WaitForTimers(0): %v, want nil", err)
	}
	if err := answer(t, waitFor(done, clock, -1)); err != nil {
		t.Fatalf("WaitForTimers(-1): %v, want nil", err)
	}
	clock.AfterFunc(time.Second, func() {})
	clock.AfterFunc(time.Second, func() {})
	if err := answer(t, waitFor(done, clock, 2)); err != nil {
		t.Fatalf("WaitForTimers(2) with 2 pending: %v, want nil", err)
	}
}

// A waiter is woken by each way a timer becomes pending.
func TestWaitForTimersWakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		last func(c *ratelimittest.Clock)
	}{
		{"AfterFunc", func(c *ratelimittest.Clock) { c.AfterFunc(time.Second, func() {}) }},
		{"AfterFunc after a stop", func(c *ratelimittest.Clock) {
			stop := c.AfterFunc(time.Second, func() {})
			c.AfterFunc(time.Second, func() {})
			stop()
		}},
	} {
		clock := ratelimittest.NewClock()
		clock.AfterFunc(time.Hour, func() {})
		clock.AfterFunc(time.Hour, func() {})()
		clock.AfterFunc(time.Millisecond, func() {})
		clock.Advance(time.Millisecond) // 1 pending
		ch := waitBlocked(t, context.Background(), clock, 2)
		tc.last(clock)
		if err := answer(t, ch); err != nil {
			t.Fatalf("%s: WaitForTimers(2) once 2 are pending: %v, want nil", tc.name, err)
		}
	}
}

// It counts pending timers only: not stopped ones, not those that came
// due.
func TestWaitForTimersCountsPendingOnly(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		set  func(*ratelimittest.Clock) // leaves 2 timers pending
	}{
		{"stopped", func(c *ratelimittest.Clock) {
			c.AfterFunc(time.Second, func() {})
			c.AfterFunc(time.Second, func() {})
			c.AfterFunc(time.Second, func() {})()
		}},
		{"due", func(c *ratelimittest.Clock) {
			c.AfterFunc(time.Second, func() {})
			c.AfterFunc(time.Second, func() {})
			c.AfterFunc(time.Millisecond, func() {})
			c.Advance(time.Millisecond)
		}},
	} {
		clock := ratelimittest.NewClock()
		tc.set(clock)
		err := answer(t, waitFor(done, clock, 3))
		if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "2 of 3") {
			t.Errorf("%s: WaitForTimers(3) with 2 pending: %v; want an error wrapping context.Canceled that says 2 of 3 are pending", tc.name, err)
		}
	}
}

// Woken by changes that leave fewer than n pending, it does not return
// early: it returns ctx's error once ctx is done.
func TestWaitForTimersNotEarly(t *testing.T) {
	clock := ratelimittest.NewClock()
	ctx, cancel := context.WithCancel(context.Background())
	ch := waitBlocked(t, ctx, clock, 3)
	stop := clock.AfterFunc(time.Second, func() {})
	clock.AfterFunc(time.Millisecond, func() {})
	clock.Advance(time.Millisecond)
	clock.AfterFunc(time.Second, func() {})
	stop()
	clock.AfterFunc(time.Second, func() {}) // 2 pending, never more
	cancel()
	err := answer(t, ch)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForTimers(3) with 2 pending, ctx cancelled: %v; want an error wrapping context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "2 of 3") {
		t.Fatalf("error %q does not say that 2 of 3 timers are pending", err)
	}
}

// It returns once its ctx times out, with an error that wraps
// context.DeadlineExceeded.
func TestWaitForTimersTimeout(t *testing.T) {
	clock := ratelimittest.NewClock()
	clock.AfterFunc(time.Second, func() {})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := answer(t, waitFor(ctx, clock, 2))
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Fatalf("WaitForTimers(2) with 1 pending: %v (ctx: %v); want an error wrapping context.DeadlineExceeded once ctx is done", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("error %q does not say that 1 of 2 timers are pending", err)
	}
}

// Many goroutines setting and stopping timers at once wake no waiter too
// early and leave none asleep.
func TestWaitForTimersConcurrent(t *testing.T) {
	clock := ratelimittest.NewClock()
	const n = 20
	var waiters []<-chan error
	for k := 1; k <= n; k++ {
		waiters = append(waiters, waitBlocked(t, context.Background(), clock, k))
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clock.AfterFunc(time.Hour, func() {})()
			clock.AfterFunc(time.Hour, func() {})
		}()
	}
	wg.Wait()
	for k, ch := range waiters {
		if err := answer(t, ch); err != nil {
			t.Fatalf("WaitForTimers(%d) with %d pending: %v", k+1, n, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := waitFor(ctx, clock, n+1)
	cancel()
	if err := answer(t, ch); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForTimers(%d) with %d pending: %v, want context.Canceled", n+1, n, err)
	}
}
