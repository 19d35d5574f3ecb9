package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestFailurePolicies kills the real server mid-run: every policy answers
// within the timeout, without panics, and decisions resume after a restart.
func TestFailurePolicies(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	cfg := fixedwindow.Config{Limit: 1000, Window: time.Minute}
	const timeout = 200 * time.Millisecond
	local, _ := memory.New(fixedwindow.Config{Limit: 1, Window: time.Minute})
	defer local.Close()
	limiters := map[string]*redis.Limiter{
		"error":    mustNew(t, c, "fp", cfg, redis.WithTimeout(timeout)),
		"open":     mustNew(t, c, "fp", cfg, redis.WithTimeout(timeout), redis.WithFailurePolicy(redis.FailOpen)),
		"closed":   mustNew(t, c, "fp", cfg, redis.WithTimeout(timeout), redis.WithFailurePolicy(redis.FailClosed)),
		"fallback": mustNew(t, c, "fp", cfg, redis.WithTimeout(timeout), redis.WithFallback(local)),
	}
	for name, l := range limiters {
		if lease, err := l.Acquire(bg, 1); err != nil || !lease.Acquired() {
			t.Fatalf("%s before the kill: %v %v", name, lease, err)
		}
	}
	srv.Stop()
	for name, l := range limiters {
		start := time.Now()
		lease, err := l.Acquire(bg, 1)
		if took := time.Since(start); took > 2*timeout {
			t.Errorf("%s: answered after %v, want within about %v", name, took, timeout)
		}
		switch name {
		case "error":
			if !errors.Is(err, redis.ErrUnavailable) {
				t.Errorf("error policy: %v, %v; want ErrUnavailable", lease, err)
			}
		case "open":
			if err != nil || !lease.Acquired() || lease.Limit() != -1 || lease.Remaining() != -1 {
				t.Errorf("open policy: %v, %v; want granted with no limit applied (Limit and Remaining -1)", lease, err)
			}
		case "closed":
			if err != nil || lease.Acquired() || lease.Reason() != ratelimit.ReasonUnavailable {
				t.Errorf("closed policy: %v, %v; want refused, ReasonUnavailable", lease, err)
			}
		case "fallback":
			first, err1 := l.Acquire(bg, 1) // the local limiter allows 1 per minute
			if err != nil || !lease.Acquired() || err1 != nil || first.Acquired() {
				t.Errorf("fallback policy: %v %v then %v %v; want the local limiter's grant, then its refusal", lease, err, first, err1)
			}
		}
	}
	// A caller's own ctx ending is reported as such, not as a backend failure.
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := limiters["error"].Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx while down: %v, want context.Canceled", err)
	}
	srv.Restart(t)
	for name, l := range limiters {
		var lease ratelimit.Lease
		var err error
		for i := 0; i < 50; i++ { // the pool reconnects
			if lease, err = l.Acquire(bg, 1); err == nil && lease.Reason() != ratelimit.ReasonUnavailable {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || !lease.Acquired() {
			t.Errorf("%s after restart: %v %v", name, lease, err)
		}
	}
}

// hammer runs goroutines that Acquire(1) until refused and returns the total.
func hammer(ls []ratelimit.Limiter, goroutines int) int64 {
	var granted atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(l ratelimit.Limiter) {
				defer wg.Done()
				for {
					lease, err := l.Acquire(context.Background(), 1)
					if err != nil || !lease.Acquired() {
						return
					}
					granted.Add(1)
				}
			}(l)
		}
	}
	wg.Wait()
	return granted.Load()
}

// TestScaleOut: three clients with their own pools share one limit; three
// memory limiters admit three times it. 64 goroutines per client.
func TestScaleOut(t *testing.T) {
	addr := redistest.Standalone(t)
	const limit = 500
	cfg := fixedwindow.Config{Limit: limit, Window: time.Hour}
	var shared, local []ratelimit.Limiter
	for i := 0; i < 3; i++ {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
		defer c.Close()
		shared = append(shared, mustNew(t, c, "scaleout", cfg))
		m, _ := memory.New(cfg)
		defer m.Close()
		local = append(local, m)
	}
	if got := hammer(shared, 64); got != limit {
		t.Fatalf("three Redis clients granted %d, want exactly %d", got, limit)
	}
	if got := hammer(local, 64); got != 3*limit {
		t.Fatalf("three memory limiters granted %d, want %d", got, 3*limit)
	}
	// The token bucket too.
	var tb []ratelimit.Limiter
	for i := 0; i < 3; i++ {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
		defer c.Close()
		tb = append(tb, mustNew(t, c, "scaleout-tb", tokenbucket.Config{Rate: 0.001, Burst: limit}))
	}
	if got := hammer(tb, 64); got != limit {
		t.Fatalf("token bucket over three clients granted %d, want exactly %d", got, limit)
	}
}

// TestScaleOutProcesses: the same with three OS processes (this test
// binary, run again as a helper).
func TestScaleOutProcesses(t *testing.T) {
	if addr := os.Getenv("RATELIMIT_HELPER_ADDR"); addr != "" {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 16})
		defer c.Close()
		l, err := redis.New(c, "scaleout-proc", fixedwindow.Config{Limit: 300, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("granted=%d\n", hammer([]ratelimit.Limiter{l}, 16))
		return
	}
	addr := redistest.Standalone(t)
	var total int64
	var procs []*exec.Cmd
	var outs []*strings.Builder
	for i := 0; i < 3; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScaleOutProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RATELIMIT_HELPER_ADDR="+addr)
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs, outs = append(procs, cmd), append(outs, out)
	}
	for i, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
		_, rest, ok := strings.Cut(outs[i].String(), "granted=")
		n, err := strconv.ParseInt(strings.Fields(rest + " ")[0], 10, 64)
		if !ok || err != nil {
			t.Fatalf("helper %d printed %q", i, outs[i])
		}
		total += n
	}
	if total != 300 {
		t.Fatalf("three processes granted %d in all, want exactly 300", total)
	}
}
