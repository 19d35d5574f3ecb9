package ratelimit_test

import (
	"math"
	"testing"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestUnlimitedTokenBucket: a token bucket of rate.Inf grants every request,
// whatever its permits and its Burst (as x/time/rate's AllowN does), and
// reports it as every limiter without a limit does: a Limit and Remaining
// of -1 on its leases, math.MaxInt64 Available. In memory, on Redis and
// through FromRate alike; and a Chain of it and a limited member reports
// the limited member's figures.
func TestUnlimitedTokenBucket(t *testing.T) {
	cfg := tokenbucket.Config{Rate: rate.Inf, Burst: 1}
	if c := cfg.Capacity(); c != math.MaxInt64 {
		t.Fatalf("Capacity() = %d, want math.MaxInt64", c)
	}
	inMemory, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer inMemory.Close()
	client := goredis.NewClient(&goredis.Options{Addr: miniredis.RunT(t).Addr()})
	defer client.Close()
	onRedis, err := redis.New(client, "unlimited", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer onRedis.Close()
	for name, l := range map[string]ratelimit.Limiter{
		"memory":   inMemory,
		"redis":    onRedis,
		"FromRate": ratelimit.FromRate(rate.NewLimiter(rate.Inf, 1)),
	} {
		for _, permits := range []int{0, 1, 5, math.MaxInt} {
			for _, wait := range []bool{false, true} {
				call := l.Acquire
				if wait {
					call = l.Wait
				}
				g, err := call(bg, permits)
				if err != nil || !g.Acquired() || g.Limit() != -1 || g.Remaining() != -1 {
					t.Errorf("%s: %d permits (Wait %v): %v, %v; want granted, Limit and Remaining -1", name, permits, wait, g, err)
				}
			}
		}
		if s, ok := l.(interface{ Stats() ratelimit.Stats }); ok && s.Stats().Available != math.MaxInt64 {
			t.Errorf("%s: Stats().Available = %d, want math.MaxInt64", name, s.Stats().Available)
		}
	}
	limited, err := memory.New(tokenbucket.Config{Rate: 1, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	for _, members := range [][]ratelimit.Limiter{{inMemory, limited}, {limited, inMemory}} {
		chain := ratelimit.Chain(members...)
		g, err := chain.Acquire(bg, 2)
		if err != nil || !g.Acquired() || g.Limit() != 5 || g.Remaining() != 3 {
			t.Errorf("Chain: %v, %v; want granted with the limited member's figures, 3 of 5", g, err)
		}
		if err := control.Refund(bg, chain, g, 2); err != nil { // a full bucket for the next chain
			t.Fatal(err)
		}
	}
}
