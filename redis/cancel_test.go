package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestCancelledLastReservation: a token bucket's last reservation,
// cancelled before its turn, holds nobody back once it is gone: the queue
// is empty, and a newcomer is granted the tokens that are there, on Redis
// as in memory. On Redis, cancelling a reservation that others followed
// keeps them ahead of newcomers.
func TestCancelledLastReservation(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		_, c := miniClient(t)
		cancelledLastReservation(t, c)
	})
	t.Run("redis", func(t *testing.T) { cancelledLastReservation(t, realClient(t)) })
}

func cancelledLastReservation(t *testing.T, c goredis.UniversalClient) {
	cfg := tokenbucket.Config{Rate: 10, Burst: 3, Queue: ratelimit.Queue{Limit: 100}}
	newLimiters := func(clock *ratelimittest.Clock) map[string]ratelimit.Limiter {
		mem, err := memory.New(cfg, memory.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		return map[string]ratelimit.Limiter{
			"memory": mem,
			"redis":  mustNew(t, c, fmt.Sprintf("cancelled-last-%d", keySeq.Add(1)), cfg, redis.WithClock(clock)),
		}
	}
	// wait starts a Wait for p permits and returns its cancel and its
	// error, once it waits as the n-th waiter: on Redis it sleeps (n timers
	// are then pending), in memory it is queued.
	wait := func(clock *ratelimittest.Clock, l ratelimit.Limiter, p, n int) (context.CancelFunc, <-chan error) {
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		_, onRedis := l.(*redis.Limiter)
		queued := l.(memory.Limiter).Stats().Queued + int64(p) // Redis does not count
		go func() { _, err := l.Wait(ctx, p); done <- err }()
		if onRedis {
			waitTimers(t, clock, n)
		} else {
			for l.(memory.Limiter).Stats().Queued != queued {
				time.Sleep(time.Millisecond)
			}
		}
		return cancel, done
	}
	clock := ratelimittest.NewClock()
	for name, l := range newLimiters(clock) {
		if lease, err := l.Acquire(bg, 2); err != nil || !lease.Acquired() {
			t.Fatalf("%s: Acquire(2) at t0: %v %v", name, lease, err)
		}
		cancel, done := wait(clock, l, 3, 1) // due at t0+200ms
		clock.Advance(100 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: cancelled Wait: %v", name, err)
		}
		if st, ok := l.(interface{ Stats() ratelimit.Stats }); ok && st.Stats().Available != 2 {
			t.Fatalf("%s: Stats after the cancel %+v, want 2 available", name, st.Stats())
		}
		lease, err := l.Acquire(bg, 2)
		if d, _ := lease.RetryAfter(); err != nil || !lease.Acquired() {
			t.Fatalf("%s: Acquire(2) once the only reservation was cancelled: %v (retry %v) %v, want granted", name, lease, d, err)
		}
		clock.Advance(time.Hour)
	}

	// Reservations a, b then c; b, in the middle, is cancelled, then c,
	// the last: a newcomer waits behind a, which still sleeps, as in
	// memory, and is granted once a is.
	clock = ratelimittest.NewClock()
	for name, l := range newLimiters(clock) {
		l.Acquire(bg, 3)
		_, doneA := wait(clock, l, 1, 1) // due at t0+100ms
		cancelB, doneB := wait(clock, l, 1, 2)
		cancelC, doneC := wait(clock, l, 1, 3)
		cancelB()
		<-doneB
		cancelC()
		<-doneC
		lease, err := l.Acquire(bg, 1)
		if d, _ := lease.RetryAfter(); err != nil || lease.Acquired() || ceilMicro(d) != 200*time.Millisecond {
			t.Fatalf("%s: Acquire(1) behind a: %v (retry %v) %v, want refused, retry 200ms (a token after a's)", name, lease, d, err)
		}
		clock.Advance(100 * time.Millisecond)
		if err := <-doneA; err != nil {
			t.Fatalf("%s: a: %v", name, err)
		}
		clock.Advance(100 * time.Millisecond)
		if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() {
			t.Fatalf("%s: Acquire(1) after a: %v %v, want granted", name, lease, err)
		}
	}
}

// TestCancelledDuringTheReservingCall: a Wait whose ctx ends while its
// reserving call is in flight (the server paused) returns at once; the
// reservation the script makes once the server resumes is cancelled when
// its answer comes, and holds nobody back.
func TestCancelledDuringTheReservingCall(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l := mustNew(t, c, "in-flight", tokenbucket.Config{Rate: 1, Burst: 100}, redis.WithTimeout(10*time.Second))
	if g, err := l.Acquire(bg, 100); err != nil || !g.Acquired() {
		t.Fatal(g, err)
	}
	srv.Pause(t)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { _, err := l.Wait(ctx, 50); done <- err }()
	time.Sleep(100 * time.Millisecond) // its call is sent, and waits for the server
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Wait: %v, want context.Canceled", err)
	}
	srv.Resume(t)
	// Without the reservation, one token is 1s away; with it, 51s.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		g, err := l.Acquire(bg, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := g.RetryAfter(); d <= 2*time.Second {
			break
		}
		if time.Now().After(deadline) {
			d, _ := g.RetryAfter()
			t.Fatalf("the cancelled Wait's reservation stands: a token is %v away", d)
		}
	}
}

// TestTiedReservations: two reservations that the refill makes due at one
// tick, both cancelled (the first, then the second): each gives its tokens
// back, and the tick's 10 are all there, as in memory.
func TestTiedReservations(t *testing.T) {
	_, c := miniClient(t)
	cfg := tokenbucket.Config{Burst: 10, Period: time.Second, PerPeriod: 10}
	clock := ratelimittest.NewClockAt(time.Unix(1_800_000_000, 0)) // on a tick
	mem, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for name, l := range map[string]ratelimit.Limiter{
		"memory": mem,
		"redis":  mustNew(t, c, "tied", cfg, redis.WithClock(clock), redis.WithoutRefusalCache()),
	} {
		if g, _ := l.Acquire(bg, 10); !g.Acquired() {
			t.Fatal(name, g)
		}
		ctx1, cancel1 := context.WithCancel(bg)
		ctx2, cancel2 := context.WithCancel(bg)
		done := make(chan error, 2)
		go func() { _, err := l.Wait(ctx1, 5); done <- err }()
		waitTimers(t, clock, 1)
		go func() { _, err := l.Wait(ctx2, 5); done <- err }()
		if name == "redis" {
			waitTimers(t, clock, 2) // each asleep on its own timer
		} else {
			for mem.Stats().Queued != 10 {
				time.Sleep(time.Millisecond)
			}
		}
		for _, cancel := range []context.CancelFunc{cancel1, cancel2} {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatal(name, err)
			}
		}
		clock.Advance(time.Second) // the tick
		if g, _ := l.Acquire(bg, 10); !g.Acquired() {
			t.Fatalf("%s: both reservations cancelled: %v, want the tick's 10", name, g)
		}
		clock.Advance(time.Hour)
	}
}
