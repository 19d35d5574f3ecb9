package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
	"golang.org/x/time/rate"
)

// TestEffectiveWindow: t is the time until the available quota next
// grows (draft-ietf-httpapi-ratelimit-headers-11), not the time until it is
// full, and a refusal's Retry-After is never earlier than its t.
func TestEffectiveWindow(t *testing.T) {
	start := time.Unix(999_960, 0) // a multiple of every window below
	for _, c := range []struct {
		name    string
		cfg     ratelimit.Config
		steps   []time.Duration // advance before each request
		want    []string        // RateLimit of each response
		retry   string          // Retry-After of the last response
		x, xres string          // X-RateLimit-Remaining and -Reset of the last
	}{
		{"token bucket, continuous", tokenbucket.Config{Rate: 0.1, Burst: 3}, []time.Duration{0, 0, 0, 0, 3 * time.Second},
			[]string{`"p";r=2;t=10`, `"p";r=1;t=10`, `"p";r=0;t=10`, `"p";r=0;t=10`, `"p";r=0;t=7`}, "7", "0", "27"},
		{"token bucket, interval", tokenbucket.Config{Period: 10 * time.Second, PerPeriod: 1, Burst: 2}, []time.Duration{0, 4 * time.Second, 0},
			[]string{`"p";r=1;t=10`, `"p";r=0;t=6`, `"p";r=0;t=6`}, "6", "0", "16"},
		{"fixed window", fixedwindow.Config{Limit: 2, Window: time.Minute}, []time.Duration{15 * time.Second, 0, 0},
			[]string{`"p";r=1;t=45`, `"p";r=0;t=45`, `"p";r=0;t=45`}, "45", "0", "45"},
		{"segmented sliding window", slidingwindow.Config{Limit: 2, Window: time.Minute, Segments: 6}, []time.Duration{5 * time.Second, 0, 0},
			[]string{`"p";r=1;t=5`, `"p";r=0;t=5`, `"p";r=0;t=55`}, "55", "0", "55"},
		{"sliding log", slidinglog.Config{Limit: 2, Window: time.Minute}, []time.Duration{0, 10 * time.Second, 0},
			[]string{`"p";r=1`, `"p";r=0`, `"p";r=0;t=50`}, "50", "0", "60"},
		{"weighted sliding window", slidingwindow.Config{Limit: 1, Window: time.Minute}, []time.Duration{0, 0},
			[]string{`"p";r=0`, `"p";r=0;t=120`}, "120", "0", "120"},
	} {
		clock := ratelimittest.NewClockAt(start)
		h := middleware(t, perKey(t, c.cfg, clock), httplimit.Options{Policy: "p", Config: c.cfg, Clock: clock, LegacyHeaders: true}, ok)
		var w *httptest.ResponseRecorder
		for i, step := range c.steps {
			clock.Advance(step)
			w = serve(h, "192.0.2.1:1", nil)
			if got := w.Header().Get("RateLimit"); got != c.want[i] {
				t.Errorf("%s: response %d: RateLimit %s, want %s", c.name, i, got, c.want[i])
			}
		}
		if w.Code != 429 || w.Header().Get("Retry-After") != c.retry || w.Header().Get("X-RateLimit-Remaining") != c.x || w.Header().Get("X-RateLimit-Reset") != c.xres {
			t.Errorf("%s: last: %d %v; want 429, Retry-After %s, X-RateLimit-Remaining %s, -Reset %s", c.name, w.Code, w.Header(), c.retry, c.x, c.xres)
		}
	}
}

// TestLongWindows: seconds are rounded up exactly, also past 2^53 ns:
// 31,000,000s + 1ns is 31000001, in Retry-After, t and the Transport's
// synthetic 429.
func TestLongWindows(t *testing.T) {
	window := 31_000_000*time.Second + 1
	cfg := fixedwindow.Config{Limit: 1, Window: window}
	clock := ratelimittest.NewClockAt(time.Unix(0, 2*int64(window)))
	h := middleware(t, perKey(t, cfg, clock), httplimit.Options{Config: cfg, Clock: clock}, ok)
	if w := serve(h, "192.0.2.1:1", nil); w.Header().Get("RateLimit") != `"default";r=0;t=31000001` || w.Header().Get("RateLimit-Policy") != `"default";q=1;w=31000001` {
		t.Fatalf("grant: %v", w.Header())
	}
	w := serve(h, "192.0.2.1:1", nil)
	if w.Code != 429 || w.Header().Get("Retry-After") != "31000001" || w.Header().Get("RateLimit") != `"default";r=0;t=31000001` {
		t.Fatalf("refusal: %d %v; want Retry-After and t 31000001", w.Code, w.Header())
	}

	var status atomic.Int32
	status.Store(200)
	srv, _ := upstream(t, &status, nil)
	tr := &httplimit.Transport{Limiter: perKey(t, cfg, clock), FailFast: true, Synthetic429: true}
	for i, want := range []string{"", "31000001"} {
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Retry-After"); got != want {
			t.Fatalf("request %d: Retry-After %q, want %q", i, got, want)
		}
	}

	// 100 years, the longest window, learnt from an upstream (MaxPause
	// lets it be).
	long := http.Header{"Retry-After": {"3153600000"}, "Ratelimit": {`"x";r=0;t=99999999999999`}}
	status.Store(429)
	srv2, hits := upstream(t, &status, long)
	tr2 := &httplimit.Transport{Limiter: perKey(t, fixedwindow.Config{Limit: 100, Window: time.Second}, nil), FailFast: true, MaxPause: 100 * 366 * 24 * time.Hour}
	for i := 0; i < 2; i++ {
		resp, err := tr2.RoundTrip(mustRequest(t, srv2.URL))
		if i == 0 {
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			continue
		}
		var rl *httplimit.RateLimitedError
		if !errors.As(err, &rl) || !retryIs(rl, 99*365*24*time.Hour, 100*366*24*time.Hour) || hits.Load() != 1 {
			t.Fatalf("after a 100-year pause: %v, hits %d", err, hits.Load())
		}
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	r, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPolicyNames: names that are not structured-field Strings are
// refused at construction; quotes and backslashes are escaped.
func TestPolicyNames(t *testing.T) {
	l := perKey(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, ratelimittest.NewClock())
	for _, name := range []string{"tab\there", "café", "nl\n", "\x7f"} {
		if _, err := httplimit.Middleware(l, httplimit.Options{Policy: name}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("policy %q: %v, want ErrInvalidConfig", name, err)
		}
		if err := httplimit.ValidPolicyName(name); err == nil {
			t.Errorf("ValidPolicyName(%q) = nil", name)
		}
	}
	h := middleware(t, l, httplimit.Options{Policy: `a "quoted" \ name`}, ok)
	if w := serve(h, "192.0.2.1:1", nil); w.Header().Get("RateLimit") != `"a \"quoted\" \\ name";r=0;t=1600` {
		t.Fatalf("escaped name: %v", w.Header())
	}
}

// TestRoutes: one middleware applies a login limit, an API limit and a
// global limit, with one RateLimit member per policy.
func TestRoutes(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Unix(3600*1000, 0))
	login := fixedwindow.Config{Limit: 1, Window: time.Minute}
	api := tokenbucket.Config{Rate: 1, Burst: 10}
	global := fixedwindow.Config{Limit: 3, Window: time.Hour}
	mw, err := httplimit.Middleware(perKey(t, global, clock), httplimit.Options{
		Policy: "global", Config: global, Clock: clock,
		Routes: []httplimit.Route{
			{Pattern: "POST /login", Policy: httplimit.Policy{Name: "login", Limiter: perKey(t, login, clock), Config: login}},
			{Pattern: "/api/", Policy: httplimit.Policy{Name: "api", Limiter: perKey(t, api, clock), Config: api}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(ok)
	for i, c := range []struct {
		method, path string
		code         int
		policy, rl   string
	}{
		{"POST", "/login", 200, `"login";q=1;w=60, "global";q=3;w=3600`, `"login";r=0;t=60, "global";r=2;t=3600`},
		{"POST", "/login", 429, `"login";q=1;w=60`, `"login";r=0;t=60`}, // the global limit is not spent
		{"GET", "/login", 200, `"global";q=3;w=3600`, `"global";r=1;t=3600`},
		{"GET", "/api/items", 200, `"api";q=10;w=10, "global";q=3;w=3600`, `"api";r=9;t=1, "global";r=0;t=3600`},
		// The global refusal gives the route's token back: r=9 after each, not 8 then 7.
		{"GET", "/api/items", 429, `"api";q=10;w=10, "global";q=3;w=3600`, `"api";r=9;t=1, "global";r=0;t=3600`},
		{"GET", "/api/items", 429, `"api";q=10;w=10, "global";q=3;w=3600`, `"api";r=9;t=1, "global";r=0;t=3600`},
	} {
		r := newRequest(c.method, c.path)
		w := serveRequest(h, r)
		if w.Code != c.code || w.Header().Get("RateLimit-Policy") != c.policy || w.Header().Get("RateLimit") != c.rl {
			t.Fatalf("request %d, %s %s: %d %v; want %d %s / %s", i, c.method, c.path, w.Code, w.Header(), c.code, c.policy, c.rl)
		}
	}

	// Only routes: other requests pass unlimited.
	only, err := httplimit.Middleware(nil, httplimit.Options{Routes: []httplimit.Route{
		{Pattern: "/x", Policy: httplimit.Policy{Name: "x", Limiter: perKey(t, concurrency.Config{Limit: 1}, clock), Config: concurrency.Config{Limit: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if w := serveRequest(only(ok), newRequest("GET", "/y")); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("unrouted request: %d %v", w.Code, w.Header())
	}
	if w := serveRequest(only(ok), newRequest("GET", "/x")); w.Header().Get("RateLimit-Policy") != `"x";q=1;qu="concurrent-requests"` || w.Header().Get("RateLimit") != `"x";r=0` {
		t.Fatalf("concurrency route: %v", w.Header())
	}

	lim := perKey(t, login, clock)
	for _, c := range []struct {
		name   string
		l      ratelimit.Keyed
		routes []httplimit.Route
	}{
		{"bad pattern", lim, []httplimit.Route{{Pattern: "GET  /x{", Policy: httplimit.Policy{Name: "a", Limiter: lim}}}},
		{"empty pattern", lim, []httplimit.Route{{Policy: httplimit.Policy{Name: "a", Limiter: lim}}}},
		{"conflicting patterns", lim, []httplimit.Route{{Pattern: "/a", Policy: httplimit.Policy{Name: "a", Limiter: lim}}, {Pattern: "/a", Policy: httplimit.Policy{Name: "b", Limiter: lim}}}},
		{"nil route limiter", lim, []httplimit.Route{{Pattern: "/a", Policy: httplimit.Policy{Name: "a"}}}},
		{"bad route name", lim, []httplimit.Route{{Pattern: "/a", Policy: httplimit.Policy{Name: "é", Limiter: lim}}}},
		{"no route name", lim, []httplimit.Route{{Pattern: "/a", Policy: httplimit.Policy{Limiter: lim}}}},
		{"invalid route config", lim, []httplimit.Route{{Pattern: "/a", Policy: httplimit.Policy{Name: "a", Limiter: lim, Config: fixedwindow.Config{}}}}},
	} {
		if mw, err := httplimit.Middleware(c.l, httplimit.Options{Routes: c.routes}); !errors.Is(err, ratelimit.ErrInvalidConfig) || mw != nil {
			t.Errorf("%s: %v, want ErrInvalidConfig", c.name, err)
		} else if !strings.Contains(err.Error(), "httplimit") {
			t.Errorf("%s: %v does not say where", c.name, err)
		}
	}
}

// TestTransportHonoursEveryPolicy: any exhausted member of RateLimit
// pauses the host, for the longest time any of them gives, whatever the
// order of the members and the lines they come in.
func TestTransportHonoursEveryPolicy(t *testing.T) {
	for _, c := range []struct {
		name   string
		hdr    http.Header
		lo, hi time.Duration
	}{
		{"second member", http.Header{"Ratelimit": {`"burst";r=5;t=1, "daily";r=0;t=30`}}, 28 * time.Second, 30 * time.Second},
		{"two exhausted", http.Header{"Ratelimit": {`"burst";r=0;t=1, "daily";r=0;t=30`}}, 28 * time.Second, 30 * time.Second},
		{"two lines", http.Header{"Ratelimit": {`"burst";r=5;t=1`, `"daily";r=0;t=30`}}, 28 * time.Second, 30 * time.Second},
		{"a comma in a name", http.Header{"Ratelimit": {`"a,b";r=3;t=1, "c";r=0;t=30`}}, 28 * time.Second, 30 * time.Second},
		{"no t: the policy's w", http.Header{"Ratelimit": {`"burst";r=5;t=1, "daily";r=0`}, "Ratelimit-Policy": {`"burst";q=10;w=1, "daily";q=100;w=40`}}, 38 * time.Second, 40 * time.Second},
		{"a policy with q=0", http.Header{"Ratelimit-Policy": {`"burst";q=10;w=1, "off";q=0;w=50`}}, 48 * time.Second, 50 * time.Second},
	} {
		var status atomic.Int32
		status.Store(200)
		srv, hits := upstream(t, &status, c.hdr)
		tr := &httplimit.Transport{Limiter: perKey(t, fixedwindow.Config{Limit: 100, Window: time.Second}, nil), FailFast: true}
		resp, err := tr.RoundTrip(mustRequest(t, srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, err = tr.RoundTrip(mustRequest(t, srv.URL))
		var rl *httplimit.RateLimitedError
		if !errors.As(err, &rl) || !retryIs(rl, c.lo, c.hi) || hits.Load() != 1 {
			t.Errorf("%s: %v, hits %d; want a local refusal for [%v, %v]", c.name, err, hits.Load(), c.lo, c.hi)
		}
	}
	// Nothing exhausted: no pause.
	var status atomic.Int32
	status.Store(200)
	srv, hits := upstream(t, &status, http.Header{"Ratelimit": {`"burst";r=5;t=1, "daily";r=7;t=30`}})
	tr := &httplimit.Transport{Limiter: perKey(t, fixedwindow.Config{Limit: 100, Window: time.Second}, nil), FailFast: true}
	for i := 0; i < 3; i++ {
		resp, err := tr.RoundTrip(mustRequest(t, srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if hits.Load() != 3 {
		t.Fatalf("hits %d, want 3", hits.Load())
	}
}

func newRequest(method, path string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	return r
}

func serveRequest(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestEffectiveWindowFromTheLease: a grant's t comes from the lease, so a
// limiter of this module given without Options.Config sends it, and a live
// reconfiguration is followed without Configured.
func TestEffectiveWindowFromTheLease(t *testing.T) {
	clock := ratelimittest.NewClock() // ratelimittest.Start: 20s into a minute
	h := middleware(t, perKey(t, tokenbucket.Config{Rate: 1, Burst: 5}, clock), httplimit.Options{Policy: "p"}, ok)
	var got []string
	for range 3 {
		got = append(got, serve(h, "192.0.2.1:1", nil).Header().Get("RateLimit"))
	}
	if want := []string{`"p";r=4;t=1`, `"p";r=3;t=1`, `"p";r=2;t=1`}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("token bucket without Config: %v, want %v", got, want)
	}

	l := perKey(t, fixedwindow.Config{Limit: 5, Window: time.Minute}, clock)
	h = middleware(t, l, httplimit.Options{Policy: "p"}, ok)
	if got := serve(h, "192.0.2.1:1", nil).Header().Get("RateLimit"); got != `"p";r=4;t=40` {
		t.Errorf("fixed window of 1m: %s, want t=40, the window's end", got)
	}
	if err := l.Reconfigure(fixedwindow.Config{Limit: 5, Window: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := serve(h, "192.0.2.1:1", nil).Header().Get("RateLimit"); got != `"p";r=3;t=10` {
		t.Errorf("reconfigured to 30s: %s, want t=10, the new window's end", got)
	}
}

// A Chain's grant says its tightest member's t, without Options.Config.
func TestEffectiveWindowOfAChain(t *testing.T) {
	clock := ratelimittest.NewClock() // 20s into a minute
	fw, err := memory.New(fixedwindow.Config{Limit: 5, Window: time.Minute}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := memory.New(tokenbucket.Config{Rate: 0.5, Burst: 3}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	h := middleware(t, partitioned.Global(ratelimit.Chain(fw, tb)), httplimit.Options{Policy: "p"}, ok)
	var got []string
	for range 2 {
		got = append(got, serve(h, "192.0.2.1:1", nil).Header().Get("RateLimit"))
	}
	// The bucket is the tightest (2 then 1 left of 3): its next token, 2s.
	if want := []string{`"p";r=2;t=2`, `"p";r=1;t=2`}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("chain: %v, want %v", got, want)
	}
}

// FromRate's grants say their next token too.
func TestEffectiveWindowOfFromRate(t *testing.T) {
	h := middleware(t, partitioned.Global(ratelimit.FromRate(rate.NewLimiter(0.25, 3))), httplimit.Options{Policy: "p"}, ok)
	// A full bucket of 3 at 1 token every 4s: the first grant leaves 2,
	// and a token comes back within 4s.
	got := serve(h, "192.0.2.1:1", nil).Header().Get("RateLimit")
	if got != `"p";r=2;t=4` {
		t.Errorf("FromRate: %s, want t=4", got)
	}
}
