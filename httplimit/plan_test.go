package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/quota"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestRouteOfAPlan: a route limited by 10 a second, 3 a day and 5 a month
// (Paris's days and months) sends one RateLimit-Policy and one RateLimit
// member per policy, a quota's t being the seconds to its period's end; a
// refusal by one spends nothing of the others; and a Transport in front of
// it pauses on whichever is exhausted, until that period's end.
func TestRouteOfAPlan(t *testing.T) {
	clock := ratelimittest.NewClockAt(at(t, "2033-06-15T14:00:00+02:00"))
	burst := tokenbucket.Config{Rate: 10, Burst: 10}
	daily := quota.Config{Limit: 3, Period: quota.Day, Timezone: "Europe/Paris"}
	monthly := quota.Config{Limit: 5, Period: quota.Month, Timezone: "Europe/Paris"}
	mw, err := httplimit.Middleware(nil, httplimit.Options{Clock: clock, Routes: []httplimit.Route{{
		Pattern: "/api/",
		Policy:  httplimit.Policy{Name: "burst", Limiter: perKey(t, burst, clock), Config: burst},
		Policies: []httplimit.Policy{
			{Name: "daily", Limiter: perKey(t, daily, clock), Config: daily},
			{Name: "monthly", Limiter: perKey(t, monthly, clock), Config: monthly},
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(ok)
	const policies = `"burst";q=10;w=1, "daily";q=3;w=86400, "monthly";q=5;w=2592000`
	// 10h to midnight, 15 days and 10h to July.
	for i, c := range []struct {
		advance    time.Duration
		code       int
		policy, rl string
		retry      string
	}{
		{0, 200, policies, `"burst";r=9;t=1, "daily";r=2;t=36000, "monthly";r=4;t=1332000`, ""},
		{0, 200, policies, `"burst";r=8;t=1, "daily";r=1;t=36000, "monthly";r=3;t=1332000`, ""},
		{0, 200, policies, `"burst";r=7;t=1, "daily";r=0;t=36000, "monthly";r=2;t=1332000`, ""},
		// The daily quota refuses: the burst's token comes back, the month's is not asked.
		{0, 429, `"burst";q=10;w=1, "daily";q=3;w=86400`, `"burst";r=7;t=1, "daily";r=0;t=36000`, "36000"},
		{10 * time.Hour, 200, policies, `"burst";r=9;t=1, "daily";r=2;t=86400, "monthly";r=1;t=1296000`, ""},
		{0, 200, policies, `"burst";r=8;t=1, "daily";r=1;t=86400, "monthly";r=0;t=1296000`, ""},
		// The month's quota refuses: the day's is given back.
		{0, 429, policies, `"burst";r=8;t=1, "daily";r=1;t=86400, "monthly";r=0;t=1296000`, "1296000"},
	} {
		clock.Advance(c.advance)
		w := serveRequest(h, newRequest("GET", "/api/items"))
		if w.Code != c.code || w.Header().Get("RateLimit-Policy") != c.policy || w.Header().Get("RateLimit") != c.rl || w.Header().Get("Retry-After") != c.retry {
			t.Fatalf("request %d: %d %v\nwant %d\nRateLimit-Policy: %s\nRateLimit: %s\nRetry-After: %s", i, w.Code, w.Header(), c.code, c.policy, c.rl, c.retry)
		}
	}

	// The same plan behind a server, a Transport in front: it pauses on
	// whichever quota a response shows exhausted, for that quota's t.
	clock = ratelimittest.NewClockAt(at(t, "2033-06-15T14:00:00+02:00"))
	mw, err = httplimit.Middleware(nil, httplimit.Options{Clock: clock, Routes: []httplimit.Route{{
		Pattern: "/api/",
		Policy:  httplimit.Policy{Name: "burst", Limiter: perKey(t, burst, clock), Config: burst},
		Policies: []httplimit.Policy{
			{Name: "daily", Limiter: perKey(t, daily, clock), Config: daily},
			{Name: "monthly", Limiter: perKey(t, monthly, clock), Config: monthly},
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })))
	t.Cleanup(srv.Close)
	tr := &httplimit.Transport{Limiter: perKey(t, tokenbucket.Config{Rate: 1000, Burst: 1000}, clock), FailFast: true, Clock: clock}
	send := func() error {
		resp, err := tr.RoundTrip(mustRequest(t, srv.URL+"/api/x"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("the server answered %d: the Transport should have paused", resp.StatusCode)
			}
		}
		return err
	}
	paused := func(what string, lo, hi time.Duration) {
		t.Helper()
		var rl *httplimit.RateLimitedError
		if err := send(); !errors.As(err, &rl) || !retryIs(rl, lo, hi) {
			t.Fatalf("%s: %v, want a local refusal for [%v, %v]", what, err, lo, hi)
		}
	}
	for i := 0; i < 3; i++ {
		if err := send(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	paused("the day's quota used up", 10*time.Hour-time.Second, 10*time.Hour)
	clock.Advance(10 * time.Hour)
	for i := 0; i < 2; i++ {
		if err := send(); err != nil {
			t.Fatalf("the next day, request %d: %v", i, err)
		}
	}
	paused("the month's quota used up", 15*24*time.Hour-time.Second, 15*24*time.Hour)
	if hits.Load() != 5 {
		t.Fatalf("%d requests reached the handler, want 5", hits.Load())
	}
}

// TestRoutePoliciesNamedTwice: two policies of one route may not share a
// name, which would make their RateLimit members ambiguous.
func TestRoutePoliciesNamedTwice(t *testing.T) {
	l := perKey(t, quota.Config{Limit: 1, Period: quota.Day}, nil)
	_, err := httplimit.Middleware(nil, httplimit.Options{Routes: []httplimit.Route{{
		Pattern: "/", Policy: httplimit.Policy{Name: "a", Limiter: l}, Policies: []httplimit.Policy{{Name: "b", Limiter: l}, {Name: "a", Limiter: l}},
	}}})
	if !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("Middleware: %v, want ErrInvalidConfig", err)
	}
}

func at(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
