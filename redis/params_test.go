package redis

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestRatesOfEveryMagnitude: a token bucket decides alike on miniredis
// and on a real server whatever its rate's magnitude (gopher-lua's
// tonumber, miniredis's, reads an exponent or more than 19 digits only
// with a decimal point: a rate of 1e20 was nil there); luaNumber's forms
// read back exactly.
func TestRatesOfEveryMagnitude(t *testing.T) {
	ctx := context.Background()
	rates := []rate.Limit{1e-9, 1.5e-9, 0.1, 1000, 1e15, 1e20, 1e300}
	got := map[string][]string{}
	for name, c := range bothServers(t) {
		for _, r := range rates {
			clock := ratelimittest.NewClock()
			l, err := New(c, fmt.Sprint("magnitude-", r), tokenbucket.Config{Rate: r, Burst: 3}, WithClock(clock), WithoutRefusalCache())
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []int{3, 1, 1} {
				lease, err := l.Acquire(ctx, p)
				if err != nil {
					t.Fatalf("%s, rate %g: Acquire(%d): %v", name, float64(r), p, err)
				}
				d, _ := lease.RetryAfter()
				got[name] = append(got[name], fmt.Sprintf("rate %g, %d: %v %d %v", float64(r), p, lease.Acquired(), lease.Remaining(), d))
				clock.Advance(time.Microsecond)
			}
			l.Close()
		}
	}
	for i := range got["redis"] {
		if got["redis"][i] != got["miniredis"][i] {
			t.Errorf("redis %q, miniredis %q", got["redis"][i], got["miniredis"][i])
		}
	}
	for _, tc := range []struct {
		f    float64
		want string
	}{{1e20, "1.0e+20"}, {1000, "1000.0"}, {0.1, "0.1"}, {1.5e-9, "1.5e-09"}, {1e-9, "1.0e-09"}, {math.Inf(1), "+Inf"}} {
		if s := algo.LuaNumber(tc.f); s != tc.want {
			t.Errorf("algo.LuaNumber(%g) = %q, want %q", tc.f, s, tc.want)
		}
	}
}

// A grant's lease says the time until the available quota next grows, for
// the configuration in force: the t httplimit sends (see ratelimit.Lease.GrowsAfter).
func TestGrantsSayWhenTheQuotaGrows(t *testing.T) {
	ctx := context.Background()
	for name, c := range bothServers(t) {
		clock := ratelimittest.NewClock() // 20s into a minute
		l, err := New(c, "grows", fixedwindow.Config{Limit: 5, Window: time.Minute}, WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(ctx, 1)
		if d, ok := lease.GrowsAfter(clock.Now()); err != nil || !ok || d != 40*time.Second {
			t.Errorf("%s: a grant of a 1m window says %v %v (%v), want 40s", name, d, ok, err)
		}
		if err := l.Reconfigure(fixedwindow.Config{Limit: 5, Window: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		lease, err = l.Acquire(ctx, 1)
		if d, ok := lease.GrowsAfter(clock.Now()); err != nil || !ok || d != 10*time.Second {
			t.Errorf("%s: reconfigured to 30s, a grant says %v %v (%v), want 10s", name, d, ok, err)
		}
		l.Close()
	}
}
