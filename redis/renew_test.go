package redis_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

// noRenewalGoroutines waits until no renewal goroutine is left, as none
// should be with no lease held, and fails the test after 5s.
func noRenewalGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for renewalGoroutines() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewal goroutines left with no lease held", renewalGoroutines())
		}
		time.Sleep(time.Millisecond)
	}
}

// renewalGoroutines counts the goroutines, other than the caller's, running
// lease renewal code of this package.
func renewalGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // this goroutine
			continue
		}
		if strings.Contains(g, "ratelimit/redis.") && strings.Contains(strings.ToLower(g), "renew") {
			count++
		}
	}
	return count
}

// scores reads the expiry (us) of every holder of the concurrency keys
// named, in one pipelined round trip.
func scores(t *testing.T, c goredis.UniversalClient, keys []string) []float64 {
	t.Helper()
	pipe := c.Pipeline()
	cmds := make([]*goredis.ZSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ZRangeWithScores(bg, k, 0, -1)
	}
	pipe.Exec(bg)
	var out []float64
	for _, cmd := range cmds {
		zs, err := cmd.Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zs {
			out = append(out, z.Score)
		}
	}
	return out
}

// TestOneRenewerPerClient: a thousand concurrency limiters on one client,
// each holding a lease, are renewed by one goroutine, on their (fake)
// clock: the leases outlive their TTL while held, with no real sleep. A
// holder that is gone (its client closed: no renewal reaches Redis) loses
// its permit after the TTL, and when no lease is held the renewer exits.
func TestOneRenewerPerClient(t *testing.T) {
	const n, ttl = 1000, time.Minute
	clock := ratelimittest.NewClock()
	addr := redistest.Standalone(t)
	holderClient := goredis.NewClient(&goredis.Options{Addr: addr})
	defer holderClient.Close()
	c := goredis.NewClient(&goredis.Options{Addr: addr}) // another process's
	defer c.Close()
	keys := make([]string, n)
	var limiters []*redis.Limiter
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("renew-%d", i)
		keys[i] = "ratelimit:{" + key + "}:cc"
		l, err := redis.New(holderClient, key, concurrency.Config{Limit: 1}, redis.WithClock(clock), redis.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lease, err := l.Acquire(bg, 1)
		if err != nil || !lease.Acquired() {
			t.Fatalf("limiter %d: %v %v", i, lease, err)
		}
		limiters = append(limiters, l)
		_ = lease
	}
	if g := renewalGoroutines(); g > 1 {
		t.Fatalf("%d renewal goroutines for %d limiters on one client, want at most 1", g, n)
	}
	// Every TTL/3 of the clock, every lease is renewed to expire a TTL later.
	for step := 1; step <= 6; step++ { // twice the TTL
		clock.Advance(ttl / 3)
		want := float64(clock.Now().Add(ttl).UnixMicro())
		deadline := time.Now().Add(10 * time.Second)
		for {
			ss := scores(t, c, keys)
			renewed := 0
			for _, s := range ss {
				if s >= want {
					renewed++
				}
			}
			if renewed == n && len(ss) == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d: %d of %d leases renewed to %v (%d held)", step, renewed, n, want, len(ss))
			}
			time.Sleep(time.Millisecond)
		}
		if g := renewalGoroutines(); g > 1 {
			t.Fatalf("step %d: %d renewal goroutines, want at most 1", step, g)
		}
	}
	// Held past twice the TTL: another process is still refused.
	other, err := redis.New(c, "renew-0", concurrency.Config{Limit: 1}, redis.WithClock(clock), redis.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if lease, err := other.Acquire(bg, 1); err != nil || lease.Acquired() {
		t.Fatalf("a held lease's permit was granted to another process past the TTL: %v %v", lease, err)
	}
	// The holder goes (its client closed, like a crashed process's):
	// nothing renews its leases any more, which expire after the TTL.
	holderClient.Close()
	clock.Advance(ttl + time.Second)
	if lease, err := other.Acquire(bg, 1); err != nil || !lease.Acquired() {
		t.Fatalf("a gone holder's permit did not come back after the TTL: %v %v", lease, err)
	} else {
		lease.Release()
	}
	// Close releases (on a closed client: fails, harmlessly); with no lease
	// held, the renewer exits.
	for _, l := range limiters {
		l.Close()
	}
	noRenewalGoroutines(t)
}

// TestCloseReleasesAndStopsRenewal: Close of a limiter releases its leases
// (another process gets the permits at once) and, once no limiter of the
// client holds a lease, no renewal goroutine is left; a later lease starts
// renewal again.
func TestCloseReleasesAndStopsRenewal(t *testing.T) {
	c := realClient(t)
	clock := ratelimittest.NewClock()
	a := mustNew(t, c, "renew-close", concurrency.Config{Limit: 2}, redis.WithClock(clock))
	b := mustNew(t, c, "renew-close", concurrency.Config{Limit: 2}, redis.WithClock(clock))
	for i := 0; i < 2; i++ {
		if lease, err := a.Acquire(bg, 1); err != nil || !lease.Acquired() {
			t.Fatalf("Acquire %d: %v %v", i, lease, err)
		}
	}
	if g := renewalGoroutines(); g != 1 {
		t.Fatalf("%d renewal goroutines while leases are held, want 1", g)
	}
	a.Close()
	if lease, err := b.Acquire(bg, 2); err != nil || !lease.Acquired() {
		t.Fatalf("after Close: %v %v; want both permits back", lease, err)
	} else {
		lease.Release()
	}
	noRenewalGoroutines(t)
	lease, err := b.Acquire(bg, 1)
	if err != nil || !lease.Acquired() {
		t.Fatalf("%v %v", lease, err)
	}
	for deadline := time.Now().Add(5 * time.Second); renewalGoroutines() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewal goroutines after a new lease, want 1", renewalGoroutines())
		}
	}
	lease.Release()
}

// TestExpiredHoldersSweptInBoundedSteps: holders whose leases expired
// together (a crashed fleet) are swept at most 64 per script run, oldest
// first, so that no run walks them all; until swept they count as held,
// which only admits less. Once only expired holders are left, the keys go.
func TestExpiredHoldersSweptInBoundedSteps(t *testing.T) {
	_, c := miniClient(t)
	clock := ratelimittest.NewClock()
	l := mustNew(t, c, "swept", concurrency.Config{Limit: 250}, redis.WithClock(clock), redis.WithoutRefusalCache())
	set, cnt := "ratelimit:{swept}:cc", "ratelimit:{swept}:cc:n"
	live := float64(clock.Now().Add(time.Hour).UnixMicro())
	holders := []goredis.Z{{Score: live, Member: "live 1"}}
	for i := range 200 {
		holders = append(holders, goredis.Z{Score: float64(i + 1), Member: fmt.Sprintf("dead-%d 1", i)})
	}
	if err := c.ZAdd(bg, set, holders...).Err(); err != nil {
		t.Fatal(err)
	}
	c.Set(bg, cnt, 201, 0)
	for run, held := range []int64{137, 73} { // held after each run's sweep
		lease, err := l.Acquire(bg, 180)
		if err != nil || lease.Acquired() || lease.Remaining() != 250-held {
			t.Fatalf("run %d: %v %v; want refused with %d left: %d holders not swept yet", run, lease, err, 250-held, held)
		}
		if n := c.ZCard(bg, set).Val(); n != held {
			t.Fatalf("run %d: %d holders left, want %d (64 swept a run)", run, n, held)
		}
	}
	lease, err := l.Acquire(bg, 180)
	if err != nil || !lease.Acquired() || lease.Remaining() != 61 {
		t.Fatalf("third run: %v %v, want granted with 61 left (8 expired holders not swept yet)", lease, err)
	}
	if n := c.ZCard(bg, set).Val(); n != 10 {
		t.Fatalf("%d holders, want 8 expired, the live one and the new one", n)
	}
	lease.Release()

	// Only expired holders left: the run that finds them drops the keys.
	c.Del(bg, set)
	if err := c.ZAdd(bg, set, holders[1:]...).Err(); err != nil {
		t.Fatal(err)
	}
	c.Set(bg, cnt, 200, 0)
	if lease, err := l.Acquire(bg, 0); err != nil || !lease.Acquired() {
		t.Fatalf("a check: %v %v", lease, err)
	}
	if n := c.Exists(bg, set, cnt).Val(); n != 0 {
		t.Fatalf("%d keys left with only expired holders in them", n)
	}
}

// TestConcurrencyRemainingNeverNegative: with more permits held than a
// lowered limit, a refusal says none are left (0), not -1, which a lease
// reads as "no limit"; memory and Redis alike.
func TestConcurrencyRemainingNeverNegative(t *testing.T) {
	_, c := miniClient(t)
	mem, err := memory.New(concurrency.Config{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for name, l := range map[string]ratelimit.Limiter{
		"memory": mem,
		"redis":  mustNew(t, c, "lowered", concurrency.Config{Limit: 5}),
	} {
		held, err := l.Acquire(bg, 4)
		if err != nil || !held.Acquired() {
			t.Fatalf("%s: %v %v", name, held, err)
		}
		if err := control.Reconfigure(l, concurrency.Config{Limit: 2}); err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(bg, 1)
		if err != nil || lease.Acquired() || lease.Remaining() != 0 || lease.Limit() != 2 {
			t.Errorf("%s: 4 held, limit lowered to 2: %v (remaining %d, limit %d) %v; want refused, 0 left of 2", name, lease, lease.Remaining(), lease.Limit(), err)
		}
		held.Release()
	}
}
