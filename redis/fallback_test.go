package redis_test

import (
	"context"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/redis"
)

// TestFallbackRefusalHasFallbackFigures: while Redis is down, a Wait that
// the fallback refuses (its deadline before the fallback's permits) is a
// refusal of the fallback, with its figures: its Limit, not Redis's.
func TestFallbackRefusalHasFallbackFigures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := goredis.NewClient(&goredis.Options{Addr: dead, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	local, err := memory.New(fixedwindow.Config{Limit: 7, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	l, err := redis.New(c, "fallback-figures", fixedwindow.Config{Limit: 1000000, Window: time.Hour},
		redis.WithFallback(local), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for i := 0; i < 7; i++ {
		if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() || lease.Limit() != 7 {
			t.Fatalf("Acquire %d: %v %v, want the fallback's grant (limit 7)", i, lease, err)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 3*time.Second)
	defer cancel()
	lease, err := l.Wait(ctx, 1)
	if err != nil || lease.Acquired() || lease.Reason() != ratelimit.ReasonDeadline {
		t.Fatalf("Wait with the fallback exhausted: %v %v, want a deadline refusal", lease, err)
	}
	if lease.Limit() != 7 || lease.Remaining() != 0 {
		t.Errorf("the fallback's refusal reports limit %d, remaining %d; want the fallback's 7 and 0", lease.Limit(), lease.Remaining())
	}
	if d, ok := lease.RetryAfter(); !ok || d <= 3*time.Second {
		t.Errorf("RetryAfter %v %v, want the fallback's, past the deadline", d, ok)
	}
}
