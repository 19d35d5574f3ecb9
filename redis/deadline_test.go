package redis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/redis"
)

// TestCallerDeadlineIsNotAFailure: with the README's client
// (ContextTimeoutEnabled, which sets the socket's read deadline to the
// ctx's) and the server paused, a call whose caller's ctx has a deadline
// shorter than the limiter's timeout returns the ctx's error, and is not
// told to WithOnFailure: the socket's deadline fires an instant before
// the ctx's own timer, and the call still ended with its caller's
// deadline.
func TestCallerDeadlineIsNotAFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	var failures atomic.Int64
	l, err := redis.New(c, "caller-deadline", fixedwindow.Config{Limit: 100, Window: time.Hour},
		redis.WithTimeout(5*time.Second), redis.WithOnFailure(func(error) { failures.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	grant, err := l.Acquire(context.Background(), 1) // loads the script, opens a connection
	if err != nil || !grant.Acquired() {
		t.Fatal(grant, err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	calls := map[string]func(ctx context.Context) error{
		"Acquire": func(ctx context.Context) error { _, err := l.Acquire(ctx, 1); return err },
		"Wait":    func(ctx context.Context) error { _, err := l.Wait(ctx, 1); return err },
		"Refund":  func(ctx context.Context) error { return l.Refund(ctx, grant, 1) },
		"Stats":   func(ctx context.Context) error { _, err := l.StatsContext(ctx); return err },
	}
	for name, call := range calls {
		for i := 0; i < 10; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			err := call(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrUnavailable) {
				t.Errorf("%s %d: %v, want the ctx's context.DeadlineExceeded", name, i, err)
			}
		}
	}
	if n := failures.Load(); n != 0 {
		t.Errorf("%d calls told to WithOnFailure, want none: the callers' deadlines passed", n)
	}
}
