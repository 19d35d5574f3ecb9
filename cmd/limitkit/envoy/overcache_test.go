package envoy

import (
	"context"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// With LocalCacheSize, a counter past its limit is answered OVER_LIMIT
// without asking the backend until its window ends: a reset of the
// backend's count behind the service's back is not seen until then, nor
// after a change of the configuration, which empties the cache. The cache
// holds at most LocalCacheSize counters; the counter learnt first goes.
func TestLocalOverLimitCache(t *testing.T) {
	ctx := context.Background()
	rules := func(rpu string) map[string]string {
		return map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + rpu + "}\n" +
			"  - key: s\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: " + rpu + "}\n"}
	}
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	for _, size := range []int{0, 2} {
		e := start(t, rules("2"), Options{LocalCacheSize: size})
		cached := size > 0
		// resetBehind resets value's count in the backend, as another
		// server's admin would.
		resetBehind := func(key, value string) {
			t.Helper()
			rule, counter := e.src.Config().Match("d", es(key, value))
			if err := e.svc.Rules().Reset(ctx, rule.PolicyName, counter); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(windowLeft(time.Minute, e.clock.Now())) // a window's start
		wantStatus(t, e.call(t, "d", 2, desc("k", "a")).Statuses[0], ok, 2, minute, 0)
		wantStatus(t, e.call(t, "d", 1, desc("k", "a")).Statuses[0], over, 2, minute, 0)
		resetBehind("k", "a")
		if cached {
			st := e.call(t, "d", 1, desc("k", "a")).Statuses[0]
			wantStatus(t, st, over, 2, minute, 0)
			if got := st.DurationUntilReset.GetSeconds(); got != 60 {
				t.Errorf("a cached answer resets in %ds, want the window's 60", got)
			}
		} else {
			wantStatus(t, e.call(t, "d", 1, desc("k", "a")).Statuses[0], ok, 2, minute, 1)
		}
		// Shadow rules are not cached: their answers count.
		e.call(t, "d", 3, desc("s", "a"))
		resetBehind("s", "a")
		wantStatus(t, e.call(t, "d", 1, desc("s", "a")).Statuses[0], ok, 2, minute, 1)
		// The next window asks the backend again.
		e.clock.Advance(time.Minute)
		wantStatus(t, e.call(t, "d", 1, desc("k", "a")).Statuses[0], ok, 2, minute, 1)
		if !cached {
			continue
		}
		// At most size counters are held.
		for _, v := range []string{"b", "c", "d"} {
			wantStatus(t, e.call(t, "d", 3, desc("k", v)).Statuses[0], over, 2, minute, 0)
		}
		e.svc.over.mu.Lock()
		held := len(e.svc.over.ends)
		inCache := func(value string) bool {
			rule, counter := e.src.Config().Match("d", es("k", value))
			_, ok := e.svc.over.ends[rule.PolicyName+"\x00"+counter]
			return ok
		}
		firstGone := !inCache("b") && inCache("c") && inCache("d")
		e.svc.over.mu.Unlock()
		if held > size || !firstGone {
			t.Fatalf("%d counters cached (b, the first learnt, gone: %v), want at most %d, the first learnt gone", held, firstGone, size)
		}
		// A change of the configuration empties the cache.
		resetBehind("k", "d")
		writeConfig(t, e.dir, rules("3"))
		waitFor(t, func() bool { r, _ := e.src.Config().Match("d", es("k", "d")); return r.RequestsPerUnit == 3 })
		wantStatus(t, e.call(t, "d", 1, desc("k", "d")).Statuses[0], ok, 3, minute, 2)
	}
}

// A full cache makes room by forgetting a counter whose window has ended
// before the one learnt first while its window lasts (a day's counter
// learnt before a second's): it keeps what still saves a call to the
// backend. With none ended, the one learnt first goes.
func TestOverCacheForgetsAnEndedWindowFirst(t *testing.T) {
	c, cfg := newOverCache(2), &Config{}
	now := time.Unix(1_000_000, 0)
	c.add(cfg, "day", now, now.Add(24*time.Hour))
	c.add(cfg, "second", now, now.Add(time.Second))
	now = now.Add(2 * time.Second)
	c.add(cfg, "minute", now, now.Add(time.Minute))
	if !c.over(cfg, "day", now) || !c.over(cfg, "minute", now) || len(c.ends) != 2 {
		t.Fatalf("after a third counter in a cache of 2: day %v, minute %v, %d held; want both, the ended second gone",
			c.over(cfg, "day", now), c.over(cfg, "minute", now), len(c.ends))
	}
	c.add(cfg, "hour", now, now.Add(time.Hour)) // none ended: the first learnt goes
	if c.over(cfg, "day", now) || !c.over(cfg, "minute", now) || !c.over(cfg, "hour", now) {
		t.Fatal("with no window ended, the counter learnt first must go, and no other")
	}
}
