package quota_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/quota"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

// fakeBackends are memory and miniredis: Wait sleeps on the fake clock.
func fakeBackends(t *testing.T) []backend { return backends(t)[:2] }

// answer is a Wait's outcome.
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

// receive is the answer on ch, failing the test if none comes within a
// few seconds of real time (a liveness bound: the clock is fake).
func receive(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer", what)
		return answer{}
	}
}

// TestWaitDeadlineBeforeNextPeriod: a Wait over an exhausted daily quota
// whose ctx ends before midnight is refused at once (ReasonDeadline, the
// RetryAfter to midnight) and changes nothing; one whose deadline is past
// midnight sleeps until then and is granted.
func TestWaitDeadlineBeforeNextPeriod(t *testing.T) {
	for _, b := range fakeBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := ratelimittest.NewClockAt(at(t, "2033-06-15T14:00:00+02:00"))
			l := b.f(t, quota.Config{Limit: 2, Period: quota.Day, Timezone: "Europe/Paris"}, clock)
			if g, err := l.Acquire(context.Background(), 2); err != nil || !g.Acquired() {
				t.Fatalf("Acquire(2): %v, %v", g, err)
			}
			ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(10*time.Hour-time.Microsecond))
			defer cancel()
			lease, err := l.Wait(ctx, 1)
			if d, ok := lease.RetryAfter(); err != nil || lease.Acquired() || lease.Reason() != ratelimit.ReasonDeadline || !ok || d != 10*time.Hour {
				t.Fatalf("Wait with a deadline before midnight: %v, %v, want refused at once for the deadline, RetryAfter 10h", lease, err)
			}
			if s, _ := l.Acquire(context.Background(), 0); s.Remaining() != 0 {
				t.Fatalf("after the refusal: %v", s)
			}
			ctx2, cancel2 := context.WithDeadline(context.Background(), clock.Now().Add(11*time.Hour))
			defer cancel2()
			ch := waitAsync(ctx2, l, 2)
			if err := clock.WaitForTimers(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			clock.Advance(10*time.Hour + 100*time.Millisecond) // midnight, and Redis's jitter
			a := receive(t, ch, "Wait past midnight")
			if a.err != nil || !a.lease.Acquired() || a.lease.Remaining() != 0 {
				t.Fatalf("Wait past midnight: %v, %v, want granted", a.lease, a.err)
			}
		})
	}
}

// TestRedisWaitJitterIsBounded: a Wait on Redis sleeps until the period's
// end and at most 100ms more (its jitter), not a tenth of a day: it is
// still asleep a microsecond before midnight, and has been granted by
// midnight plus 100ms. Twenty waiters, each on its own quota.
func TestRedisWaitJitterIsBounded(t *testing.T) {
	_, client := miniClient(t)
	cfg := quota.Config{Limit: 1, Period: quota.Day}
	for i := 0; i < 20; i++ {
		clock := ratelimittest.NewClockAt(at(t, "2033-06-15T04:00:00Z"))
		l, err := redis.New(client, fmt.Sprintf("jitter-%d", i), cfg, redis.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		if g, err := l.Acquire(context.Background(), 1); err != nil || !g.Acquired() {
			t.Fatalf("Acquire: %v, %v", g, err)
		}
		ch := waitAsync(context.Background(), l, 1)
		if err := clock.WaitForTimers(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(20*time.Hour - time.Microsecond)
		select {
		case a := <-ch:
			t.Fatalf("waiter %d answered before midnight: %v, %v", i, a.lease, a.err)
		default:
		}
		if n := clock.Pending(); n != 1 {
			t.Fatalf("waiter %d: %d timers pending before midnight, want its sleep", i, n)
		}
		clock.Advance(time.Microsecond + 100*time.Millisecond)
		if a := receive(t, ch, fmt.Sprintf("waiter %d at midnight plus 100ms", i)); a.err != nil || !a.lease.Acquired() {
			t.Fatalf("waiter %d: %v, %v", i, a.lease, a.err)
		}
		l.Close()
	}
}

// TestReconfigureAndReset: a quota's count is held against a new Limit,
// then in the period of a new Period holding the change, until that
// period ends; Reset empties it; another algorithm's configuration is
// refused and changes nothing.
func TestReconfigureAndReset(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			clock := ratelimittest.NewClockAt(at(t, "2033-06-15T10:00:00+02:00"))
			l := b.f(t, quota.Config{Limit: 5, Period: quota.Day, Timezone: "Europe/Paris"}, clock)
			want := func(what string, rem int64, reset string) {
				t.Helper()
				s, err := l.Acquire(ctx, 0)
				if err != nil || s.Remaining() != rem || reset != "" && s.ResetAfter() != at(t, reset).Sub(clock.Now()) {
					t.Fatalf("%s: %v (reset %v), %v; want %d remaining until %s", what, s, s.ResetAfter(), err, rem, reset)
				}
			}
			if g, _ := l.Acquire(ctx, 3); !g.Acquired() {
				t.Fatalf("Acquire(3): %v", g)
			}
			if err := control.Reconfigure(l, quota.Config{Limit: 4, Period: quota.Day, Timezone: "Europe/Paris"}); err != nil {
				t.Fatal(err)
			}
			want("limit 4", 1, "2033-06-16T00:00:00+02:00")
			if err := control.Reconfigure(l, quota.Config{Limit: 10, Period: quota.Month, Timezone: "Asia/Tokyo"}); err != nil {
				t.Fatal(err)
			}
			want("a month in Tokyo", 7, "2033-07-01T00:00:00+09:00")
			clock.Set(at(t, "2033-06-30T23:59:59+09:00"))
			want("the month's last second", 7, "2033-07-01T00:00:00+09:00")
			clock.Set(at(t, "2033-07-01T00:00:00+09:00"))
			want("the next month", 10, "")
			if g, _ := l.Acquire(ctx, 6); !g.Acquired() {
				t.Fatalf("Acquire(6): %v", g)
			}
			if err := control.Reconfigure(l, quota.Config{Limit: 10, Period: "fortnight"}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
				t.Fatalf("Reconfigure to an invalid period: %v", err)
			}
			if err := control.Reconfigure(l, quota.Config{Limit: 10, Period: quota.Day, Timezone: "Local"}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
				t.Fatalf("Reconfigure to Local: %v", err)
			}
			want("after refused reconfigurations", 4, "")
			if err := control.Reset(ctx, l); err != nil {
				t.Fatal(err)
			}
			want("after Reset", 10, "")
		})
	}
}
