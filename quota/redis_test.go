package quota_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/quota"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

// ceilMicro rounds d up to the microsecond, the resolution of the
// durations the script replies.
func ceilMicro(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r > 0 {
		d += time.Microsecond - r
	}
	return d
}

// sameLease fails the test unless m (memory's) and r (Redis's) decided
// alike, to the microsecond.
func sameLease(t testing.TB, what string, m, r ratelimit.Lease) {
	t.Helper()
	md, mok := m.RetryAfter()
	rd, rok := r.RetryAfter()
	if m.Acquired() != r.Acquired() || m.Remaining() != r.Remaining() || ceilMicro(md) != rd || mok != rok ||
		ceilMicro(m.ResetAfter()) != r.ResetAfter() {
		t.Fatalf("%s:\nmemory %v retry %v reset %v\nredis  %v retry %v reset %v", what, m, md, m.ResetAfter(), r, rd, r.ResetAfter())
	}
}

// parityConfigs are the configurations the random sequences switch
// between (Reconfigure), all of one algorithm.
var parityConfigs = []quota.Config{
	{Period: quota.Day, Timezone: "Europe/Paris"},
	{Period: quota.Day, Timezone: "Australia/Lord_Howe"},
	{Period: quota.Day, Timezone: "America/Havana"},
	{Period: quota.Week, WeekStart: time.Monday, Timezone: "America/New_York"},
	{Period: quota.Week, Timezone: "America/Santiago"},
	{Period: quota.Month, Timezone: "Europe/Paris"},
	{Period: quota.Year, Timezone: "Pacific/Chatham"},
}

// parity runs random sequences of acquisitions, refunds and
// reconfigurations on memory and Redis at the same instants of a fake
// clock (pinned in the scripts), which jump to just before and exactly at
// the periods' ends, and requires identical leases.
func parity(t *testing.T, client goredis.UniversalClient, sequences int) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(37))
	var refusals, reconfigured, refunded int
	for seq := 0; seq < sequences; seq++ {
		cfg := parityConfigs[rng.Intn(len(parityConfigs))]
		cfg.Limit = 1 + rng.Intn(6)
		clock := ratelimittest.NewClock()
		clock.Advance(time.Duration(rng.Int63n(int64(3 * 365 * 24 * time.Hour))).Truncate(time.Microsecond))
		mem, err := memory.New(cfg, memory.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		red, err := redis.New(client, fmt.Sprintf("parity-%d", keySeq.Add(1)), cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
		if err != nil {
			t.Fatal(err)
		}
		var granted [][2]ratelimit.Lease
		var last ratelimit.Lease
		for i := 0; i < 40; i++ {
			what := fmt.Sprintf("seq %d step %d (%+v) at %v", seq, i, cfg, clock.Now())
			switch d, ok := last.RetryAfter(); {
			case ok && rng.Intn(2) == 0: // to the period's end, or just before
				clock.Advance(ceilMicro(d) - time.Duration(rng.Intn(2))*time.Microsecond)
			case rng.Intn(3) == 0:
				clock.Advance(time.Duration(rng.Int63n(int64(time.Minute))).Truncate(time.Microsecond))
			default:
				clock.Advance(time.Duration(rng.Int63n(int64(30 * time.Hour))).Truncate(time.Microsecond))
			}
			switch {
			case len(granted) > 0 && rng.Intn(6) == 0:
				k := rng.Intn(len(granted))
				p := granted[k][0].Limit() - granted[k][0].Remaining() // at most what it took
				p = 1 + rng.Int63n(max(p, 1))
				err1 := mem.Refund(ctx, granted[k][0], int(min(p, int64(cfg.Limit))))
				err2 := red.Refund(ctx, granted[k][1], int(min(p, int64(cfg.Limit))))
				if err1 != nil || err2 != nil {
					t.Fatalf("%s: Refund: %v, %v", what, err1, err2)
				}
				granted = append(granted[:k], granted[k+1:]...)
				refunded++
			case rng.Intn(8) == 0:
				next := parityConfigs[rng.Intn(len(parityConfigs))]
				next.Limit = 1 + rng.Intn(6)
				if err1, err2 := mem.Reconfigure(next), red.Reconfigure(next); err1 != nil || err2 != nil {
					t.Fatalf("%s: Reconfigure(%+v): %v, %v", what, next, err1, err2)
				}
				cfg = next
				reconfigured++
			}
			p := rng.Intn(cfg.Limit + 1)
			m, err1 := mem.Acquire(ctx, p)
			r, err2 := red.Acquire(ctx, p)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: Acquire(%d): %v, %v", what, p, err1, err2)
			}
			sameLease(t, fmt.Sprintf("%s, %d permits", what, p), m, r)
			last = m
			if !m.Acquired() {
				refusals++
			} else if p > 0 {
				granted = append(granted, [2]ratelimit.Lease{m, r})
			}
		}
		mem.Close()
		red.Close()
	}
	if refusals == 0 || reconfigured == 0 || refunded == 0 {
		t.Fatalf("%d refusals, %d reconfigurations, %d refunds compared: the sequences test too little", refusals, reconfigured, refunded)
	}
}

// TestParityMiniredis: the script on miniredis (gopher-lua, slow under the
// race detector: fewer sequences).
func TestParityMiniredis(t *testing.T) {
	_, c := miniClient(t)
	parity(t, c, 15)
}

func TestParityRedis(t *testing.T) { parity(t, realClient(t), 60) }

// offsetClock is the system clock moved by d, for a process whose clock
// is ahead of Redis's (d > 0) or behind it.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }
func (c offsetClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// TestSkewedClocksAgree: two processes whose clocks are 1s ahead of
// Redis's and 1s behind it (2s apart) share a daily quota of 3. At
// instants around midnight each decides as one process on Redis's clock
// would (memory, on that clock): Redis's TIME picks the period, whatever
// the day their own clocks read. miniredis's TIME is set to each instant.
func TestSkewedClocksAgree(t *testing.T) {
	m, client := miniClient(t)
	cfg := quota.Config{Limit: 3, Period: quota.Day, Timezone: "Europe/Paris"}
	midnight := at(t, "2034-03-27T00:00:00+02:00") // after the 23-hour day
	server := ratelimittest.NewClockAt(midnight.Add(-3 * time.Second))
	ahead := ratelimittest.NewClockAt(server.Now().Add(time.Second))
	behind := ratelimittest.NewClockAt(server.Now().Add(-time.Second))
	oracle, err := memory.New(cfg, memory.WithClock(server))
	if err != nil {
		t.Fatal(err)
	}
	defer oracle.Close()
	processes := map[string]*redis.Limiter{}
	for name, clock := range map[string]*ratelimittest.Clock{"ahead": ahead, "behind": behind} {
		l, err := redis.New(client, "skewed", cfg, redis.WithLocalClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		processes[name] = l
	}
	ctx := context.Background()
	var grants int
	for _, off := range []time.Duration{-2500 * time.Millisecond, -1500 * time.Millisecond, -time.Second, -500 * time.Millisecond,
		-time.Microsecond, 0, time.Microsecond, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond} {
		now := midnight.Add(off)
		server.Set(now)
		ahead.Set(now.Add(time.Second))
		behind.Set(now.Add(-time.Second))
		m.SetTime(now)
		for i, name := range []string{"ahead", "behind", "ahead", "behind"} {
			r, err := processes[name].Acquire(ctx, 1)
			if err != nil {
				t.Fatalf("%v from midnight, %s: %v", off, name, err)
			}
			o, _ := oracle.Acquire(ctx, 1)
			sameLease(t, fmt.Sprintf("%v from midnight, call %d (%s)", off, i, name), o, r)
			if r.Acquired() {
				grants++
			}
		}
	}
	if grants != 6 {
		t.Fatalf("%d grants over two days of 3, want 6", grants)
	}
}

// TestSkewedClocksRealServer: on a real server, two processes whose clocks
// are 2s apart, one just past its next midnight and the other just
// before it, both far from Redis's (the real clock): Redis's TIME decides
// the period, so they share today's quota of 3, and each refusal waits
// for today's end by Redis's clock, not for the midnight their clocks
// straddle.
func TestSkewedClocksRealServer(t *testing.T) {
	client := realClient(t)
	// A zone whose day ends more than an hour from now, on either side.
	var zone string
	var next time.Time
	for _, z := range []string{"UTC", "Asia/Tokyo", "America/New_York"} {
		loc, _ := time.LoadLocation(z)
		now := time.Now().In(loc)
		y, mo, d := now.Date()
		n := time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
		if n.Sub(now) > time.Hour && now.Sub(time.Date(y, mo, d, 0, 0, 0, 0, loc)) > time.Hour {
			zone, next = z, n
			break
		}
	}
	cfg := quota.Config{Limit: 3, Period: quota.Day, Timezone: zone}
	toNext := time.Until(next)
	var ls []*redis.Limiter
	for _, d := range []time.Duration{toNext + time.Second, toNext - time.Second} {
		l, err := redis.New(client, "skewed-real", cfg, redis.WithLocalClock(offsetClock{d}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	ctx := context.Background()
	var granted int
	for i, p := range []int{2, 1, 1, 1, 1} {
		lease, err := ls[i%2].Acquire(ctx, p)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if lease.Acquired() {
			granted += p
			continue
		}
		if d, ok := lease.RetryAfter(); !ok || d < time.Hour || d > 24*time.Hour {
			t.Fatalf("call %d refused with RetryAfter %v, %v: want today's end by Redis's clock, more than an hour away", i, d, ok)
		}
	}
	if granted != 3 {
		t.Fatalf("%d permits granted, want 3: the processes disagreed on the period", granted)
	}
}

// TestClockFarFromRedisIsAnError: a process whose clock is more than a
// period away from Redis's cannot tell Redis's period, and says so, under
// FailOpen too (a lasting condition, whose every call would be granted).
func TestClockFarFromRedisIsAnError(t *testing.T) {
	m, client := miniClient(t)
	m.SetTime(at(t, "2034-01-10T12:00:00Z"))
	for _, policy := range []redis.FailurePolicy{redis.FailError, redis.FailOpen} {
		l, err := redis.New(client, "far", quota.Config{Limit: 1, Period: quota.Day},
			redis.WithLocalClock(ratelimittest.NewClockAt(at(t, "2034-01-13T12:00:00Z"))), redis.WithFailurePolicy(policy))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lease, err := l.Acquire(context.Background(), 1)
		if !errors.Is(err, redis.ErrUnavailable) || !strings.Contains(err.Error(), "more than a period away") || lease.Acquired() {
			t.Fatalf("%v: Acquire: %v, %v; want ErrUnavailable saying the clock is more than a period away", policy, lease, err)
		}
	}
}
