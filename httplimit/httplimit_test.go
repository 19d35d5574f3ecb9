package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A partitioned limiter is a Keyed, as the package doc says.
var _ ratelimit.Keyed = (*partitioned.Limiter)(nil)

func perKey(t testing.TB, cfg ratelimit.Config, clock ratelimit.Clock) *partitioned.Limiter {
	return perKeySeen(t, cfg, clock, &sync.Map{})
}

// perKeySeen is perKey keeping each partition's limiter in seen.
func perKeySeen(t testing.TB, cfg ratelimit.Config, clock ratelimit.Clock, seen *sync.Map) *partitioned.Limiter {
	l, err := partitioned.New(partitioned.Config{
		New: func(key string) (ratelimit.Limiter, error) {
			m, err := memory.New(cfg, memory.WithClock(clock))
			if err == nil {
				seen.Store(key, m)
			}
			return m, err
		},
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// middleware is httplimit.Middleware(l, o)(next), failing the test on an error.
func middleware(t testing.TB, l ratelimit.Keyed, o httplimit.Options, next http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.Middleware(l, o)
	if err != nil {
		t.Fatal(err)
	}
	return mw(next)
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func serve(h http.Handler, remote string, hdr http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestMiddlewareHeaders: the fields of a fixed window, given as a value or
// as a pointer (which every backend takes too).
func TestMiddlewareHeaders(t *testing.T) {
	for _, cfg := range []ratelimit.Config{fixedwindow.Config{Limit: 3, Window: time.Minute}, &fixedwindow.Config{Limit: 3, Window: time.Minute}} {
		t.Run(fmt.Sprintf("%T", cfg), func(t *testing.T) { testMiddlewareHeaders(t, cfg) })
	}
}

func testMiddlewareHeaders(t *testing.T, cfg ratelimit.Config) {
	clock := ratelimittest.NewClock()
	clock.Advance(40 * time.Second) // a whole minute: the window ends in 60s
	h := middleware(t, perKey(t, cfg, clock),
		httplimit.Options{Config: cfg, Clock: clock, Policy: "per-ip", LegacyHeaders: true}, ok)
	for i, want := range []string{`"per-ip";r=2;t=60`, `"per-ip";r=1;t=60`, `"per-ip";r=0;t=60`} {
		w := serve(h, "192.0.2.1:1234", nil)
		if w.Code != 200 || w.Header().Get("RateLimit") != want || w.Header().Get("RateLimit-Policy") != `"per-ip";q=3;w=60` {
			t.Fatalf("request %d: %d %v", i, w.Code, w.Header())
		}
	}
	clock.Advance(59*time.Second + 500*time.Millisecond)
	w := serve(h, "192.0.2.1:1234", nil)
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") != `"per-ip";r=0;t=1` {
		t.Fatalf("refused: %d %v; want 429, Retry-After 1 (0.5s rounded up)", w.Code, w.Header())
	}
	if w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("X-RateLimit-Remaining") != "0" || w.Header().Get("X-RateLimit-Reset") != "1" {
		t.Fatalf("legacy headers: %v", w.Header())
	}
	if other := serve(h, "192.0.2.2:1", nil); other.Code != 200 {
		t.Fatalf("another client: %d, want its own limit", other.Code)
	}
}

func TestMiddlewareRetryAfterRoundsUp(t *testing.T) {
	clock := ratelimittest.NewClock()
	var rejected ratelimit.Lease
	h := middleware(t, perKey(t, tokenbucket.Config{Rate: 0.4, Burst: 1}, clock), httplimit.Options{
		StatusCode: 503,
		OnRejected: func(w http.ResponseWriter, r *http.Request, l ratelimit.Lease) {
			rejected = l
			w.WriteHeader(503)
			io.WriteString(w, "slow down")
		},
	}, ok)
	serve(h, "10.0.0.1:1", nil)
	w := serve(h, "10.0.0.1:1", nil)
	if w.Code != 503 || w.Body.String() != "slow down" || w.Header().Get("Retry-After") != "3" || rejected.Acquired() {
		t.Fatalf("%d %q %v; want the hook's 503 with Retry-After 3 (2.5s rounded up)", w.Code, w.Body, w.Header())
	}
}

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, c := range []struct {
		name, remote string
		hdr          http.Header
		trusted      []netip.Prefix
		want         string
	}{
		{"remote only", "203.0.113.9:5555", nil, nil, "203.0.113.9"},
		{"headers ignored without trusted proxies", "10.1.1.1:1", http.Header{"X-Forwarded-For": {"198.51.100.7"}}, nil, "10.1.1.1"},
		{"headers ignored from an untrusted peer", "203.0.113.9:1", http.Header{"X-Forwarded-For": {"198.51.100.7"}}, proxies, "203.0.113.9"},
		{"XFF through trusted proxies", "10.1.1.1:1", http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.7, 10.2.2.2"}}, proxies, "198.51.100.7"},
		{"Forwarded first", "[::1]:1", http.Header{"Forwarded": {`for=198.51.100.8;proto=https, for="[2001:db8::1]:4711"`}, "X-Forwarded-For": {"9.9.9.9"}}, proxies, "2001:db8::1"},
		{"IPv6 remote", "[2001:db8::2]:80", nil, proxies, "2001:db8::2"},
		{"only proxies", "10.1.1.1:1", http.Header{"X-Forwarded-For": {"10.3.3.3"}}, proxies, "10.3.3.3"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		r.Header = c.hdr
		if r.Header == nil {
			r.Header = http.Header{}
		}
		if got := httplimit.ClientIP(c.trusted...)(r); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestMiddlewareWaitMode(t *testing.T) {
	// MaxWait sets a real-time deadline: the limiter's clock reads the present.
	clock := ratelimittest.NewClockAt(time.Now().Truncate(time.Second))
	cfg := fixedwindow.Config{Limit: 1, Window: time.Second, Queue: ratelimit.Queue{Limit: 5}}
	var seen sync.Map
	h := middleware(t, perKeySeen(t, cfg, clock, &seen), httplimit.Options{MaxWait: time.Hour}, ok)
	serve(h, "1.1.1.1:1", nil)
	done := make(chan int, 1)
	go func() { done <- serve(h, "1.1.1.1:1", nil).Code }()
	m, _ := seen.Load("1.1.1.1")
	for m.(memory.Limiter).Stats().Queued == 0 {
		select {
		case code := <-done:
			t.Fatalf("the request was answered (%d) without waiting", code)
		case <-time.After(100 * time.Microsecond):
		}
	}
	clock.Advance(time.Second)
	if code := <-done; code != 200 {
		t.Fatalf("waiting request: %d, want 200 once the window opens", code)
	}
	// MaxWait shorter than the wait: refused at once with Retry-After.
	short := middleware(t, perKey(t, cfg, clock), httplimit.Options{MaxWait: time.Millisecond}, ok)
	serve(short, "1.1.1.1:1", nil)
	if w := serve(short, "1.1.1.1:1", nil); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("short MaxWait: %d %v", w.Code, w.Header())
	}
}

func TestMiddlewareReleasesOnPanic(t *testing.T) {
	clock := ratelimittest.NewClock()
	l := perKey(t, concurrency.Config{Limit: 1}, clock)
	h := middleware(t, l, httplimit.Options{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	}))
	for i := 0; i < 3; i++ {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			serve(h, "1.2.3.4:1", nil)
		}()
	}
	if lease, _ := l.Acquire(context.Background(), "1.2.3.4", 1); !lease.Acquired() {
		t.Fatalf("the permit was not released by the panicking handler: %v", lease)
	}
}

// upstream counts requests and answers with the given status and headers.
func upstream(t *testing.T, status *atomic.Int32, hdr http.Header) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		for k, v := range hdr {
			w.Header()[k] = v
		}
		w.WriteHeader(int(status.Load()))
		io.WriteString(w, "hello")
	}))
	t.Cleanup(s.Close)
	return s, &hits
}

func TestTransportFailFastAndSynthetic(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv, hits := upstream(t, &status, nil)
	clock := ratelimittest.NewClock()
	tr := &httplimit.Transport{Limiter: perKey(t, fixedwindow.Config{Limit: 2, Window: time.Second}, clock), FailFast: true}
	c := &http.Client{Transport: tr}
	for i := 0; i < 2; i++ {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	body := &trackingBody{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequest("POST", srv.URL, body)
	_, err := tr.RoundTrip(req)
	var rl *httplimit.RateLimitedError
	if !errors.Is(err, httplimit.ErrRateLimited) || !errors.As(err, &rl) || !retryIs(rl, time.Second, time.Second) {
		t.Fatalf("third request: %v, want ErrRateLimited with RetryAfter 1s", err)
	}
	if hits.Load() != 2 || !body.closed || body.read {
		t.Fatalf("hits %d, body closed %v read %v: a refused request is not sent and its body is closed unread", hits.Load(), body.closed, body.read)
	}
	tr.Synthetic429 = true
	resp, err := c.Get(srv.URL)
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("synthetic: %v %v", resp, err)
	}
	resp.Body.Close()
}

type trackingBody struct {
	io.Reader
	read, closed bool
}

func (b *trackingBody) Read(p []byte) (int, error) { b.read = true; return b.Reader.Read(p) }
func (b *trackingBody) Close() error               { b.closed = true; return nil }

// A pause learnt from one response is cut to MaxPause (366 days by
// default): an HTTP-date in the year 9999 does not stall requests for
// centuries.
func TestTransportMaxPause(t *testing.T) {
	for _, c := range []struct {
		max, want time.Duration
	}{{0, 366 * 24 * time.Hour}, {time.Hour, time.Hour}} {
		var status atomic.Int32
		status.Store(429)
		srv, _ := upstream(t, &status, http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}})
		clock := ratelimittest.NewClock()
		tr := &httplimit.Transport{Limiter: perKey(t, fixedwindow.Config{Limit: 100, Window: time.Second}, nil), FailFast: true, Clock: clock, MaxPause: c.max}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, err = tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
		var rl *httplimit.RateLimitedError
		if !errors.As(err, &rl) || !retryIs(rl, c.want, c.want) {
			t.Errorf("MaxPause %v: %v; want a local refusal for %v", c.max, err, c.want)
		}
		clock.Advance(c.want)
		if resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil)); err != nil {
			t.Errorf("MaxPause %v, after it: %v", c.max, err)
		} else {
			resp.Body.Close()
		}
	}
}

func TestTransportLearnsFromUpstream(t *testing.T) {
	for _, c := range []struct {
		name string
		hdr  func() http.Header
		code int32
	}{
		{"Retry-After seconds", func() http.Header { return http.Header{"Retry-After": {"120"}} }, 429},
		{"Retry-After HTTP-date", func() http.Header {
			return http.Header{"Retry-After": {time.Now().Add(120 * time.Second).UTC().Format(http.TimeFormat)}}
		}, 503},
		{"RateLimit r=0", func() http.Header { return http.Header{"Ratelimit": {`"default";r=0;t=120`}} }, 200},
	} {
		var status atomic.Int32
		status.Store(c.code)
		srv, hits := upstream(t, &status, c.hdr())
		tr := &httplimit.Transport{Limiter: perKey(t, fixedwindow.Config{Limit: 100, Window: time.Second}, nil), FailFast: true}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, err = tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
		var rl *httplimit.RateLimitedError
		if !errors.As(err, &rl) || !retryIs(rl, 118*time.Second, 120*time.Second) || hits.Load() != 1 {
			t.Errorf("%s: %v, hits %d; want a local refusal for about 120s and no second request", c.name, err, hits.Load())
		}
		// In Wait mode a deadline before the pause's end is refused at once.
		tr.FailFast = false
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil).WithContext(ctx))
		cancel()
		if !errors.Is(err, httplimit.ErrRateLimited) || hits.Load() != 1 {
			t.Errorf("%s, wait mode: %v, hits %d", c.name, err, hits.Load())
		}
	}
}

func TestTransportHoldsConcurrencyUntilBodyClose(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv, _ := upstream(t, &status, nil)
	tr := &httplimit.Transport{Limiter: perKey(t, concurrency.Config{Limit: 1}, nil), FailFast: true}
	first, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(first.Body) // read, but not closed: the permit is still held
	_, err = tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
	var rl *httplimit.RateLimitedError
	if !errors.As(err, &rl) {
		t.Fatalf("second request with the first body open: %v, want refused", err)
	}
	if d, ok := rl.RetryAfter(); ok {
		t.Errorf("a concurrency refusal's RetryAfter = %v, want unknown", d)
	}
	tr.Synthetic429 = true
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("synthetic 429 of a concurrency refusal: %v, %v; want a 429 without Retry-After", resp, err)
	}
	resp.Body.Close()
	tr.Synthetic429 = false
	first.Body.Close()
	first.Body.Close()
	second, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	second.Body.Close()
	// A failed round trip gives the permit back at once.
	tr.Key = func(*http.Request) string { return "same" }
	for i := 0; i < 3; i++ {
		bad, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
		if _, err := tr.RoundTrip(bad); err == nil || errors.Is(err, httplimit.ErrRateLimited) {
			t.Fatalf("dial failure %d: %v, want the dial error (permit released each time)", i, err)
		}
	}
}

func TestTransportWaitCancel(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv, hits := upstream(t, &status, nil)
	cfg := fixedwindow.Config{Limit: 1, Window: time.Hour, Queue: ratelimit.Queue{Limit: 1}}
	var seen sync.Map
	tr := &httplimit.Transport{Limiter: perKeySeen(t, cfg, nil, &seen)}
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil).WithContext(ctx))
		done <- err
	}()
	host := strings.TrimPrefix(srv.URL, "http://")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Microsecond) { // the request is waiting
		if l, ok := seen.Load(host); ok && l.(memory.Limiter).Stats().Queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || hits.Load() != 1 {
		t.Fatalf("cancelled wait: %v, hits %d", err, hits.Load())
	}
}

func BenchmarkMiddleware(b *testing.B) {
	l := perKey(b, tokenbucket.Config{Rate: 1e9, Burst: 1 << 40}, nil)
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"middleware", middleware(b, l, httplimit.Options{Window: time.Second}, bare)}} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c.h.ServeHTTP(w, r)
			}
		})
	}
}

// TestMiddlewareInvalid: a nil limiter and out-of-range options are errors
// at construction, and a nil handler answers 500 (logged) instead of
// panicking.
func TestMiddlewareInvalid(t *testing.T) {
	l := perKey(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, ratelimittest.NewClock())
	var nilPartitioned *partitioned.Limiter
	for _, c := range []struct {
		name string
		l    ratelimit.Keyed
		o    httplimit.Options
	}{
		{"nil limiter", nil, httplimit.Options{}},
		{"nil *partitioned.Limiter", nilPartitioned, httplimit.Options{}},
		{"nil Func", partitioned.Func(nil), httplimit.Options{}},
		{"Global(nil)", partitioned.Global(nil), httplimit.Options{}},
		{"StatusCode 99", l, httplimit.Options{StatusCode: 99}},
		{"StatusCode 200", l, httplimit.Options{StatusCode: 200}},
		{"StatusCode 1000", l, httplimit.Options{StatusCode: 1000}},
		{"negative MaxWait", l, httplimit.Options{MaxWait: -time.Second}},
	} {
		if mw, err := httplimit.Middleware(c.l, c.o); !errors.Is(err, ratelimit.ErrInvalidConfig) || mw != nil {
			t.Errorf("%s: %v, want ErrInvalidConfig and no middleware", c.name, err)
		}
	}
	var logged strings.Builder
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	mw, err := httplimit.Middleware(l, httplimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(nil)
	if w := serve(h, "192.0.2.1:1", nil); w.Code != http.StatusInternalServerError {
		t.Fatalf("nil handler: %d, want 500", w.Code)
	}
	if !strings.Contains(logged.String(), "nil handler") {
		t.Fatalf("nil handler: logged %q, want it said", logged.String())
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportInvalid: a Transport without a limiter, a nil Transport, a
// request without a URL, and a Base that breaks the RoundTripper contract
// give errors, not panics; the request's body is closed and the permit
// given back.
func TestTransportInvalid(t *testing.T) {
	for _, tr := range []*httplimit.Transport{{}, nil} {
		body := &trackingBody{Reader: strings.NewReader("payload")}
		req, _ := http.NewRequest("POST", "http://example.invalid/", body)
		if _, err := tr.RoundTrip(req); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("Transport %v without a limiter: %v, want ErrInvalidConfig", tr, err)
		}
		if !body.closed || body.read {
			t.Errorf("without a limiter: body closed %v, read %v; want closed unread", body.closed, body.read)
		}
	}
	if _, err := (&httplimit.Transport{}).RoundTrip(&http.Request{}); err == nil {
		t.Error("a request without a URL: no error")
	}

	var calls atomic.Int32
	var answer bool // a response without a Body; else nil, nil
	tr := &httplimit.Transport{
		Limiter:  perKey(t, concurrency.Config{Limit: 1}, nil),
		FailFast: true,
		Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			calls.Add(1)
			if !answer {
				return nil, nil
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}}, nil
		}),
	}
	for i := 0; i < 2; i++ { // nil, nil: an error, and the permit back
		if resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://upstream/", nil)); err == nil || resp != nil {
			t.Fatalf("Base returning nil, nil: %v, %v; want an error", resp, err)
		}
	}
	answer = true
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://upstream/", nil))
	if err != nil || resp.Body == nil {
		t.Fatalf("Base returning no Body: %v, %v; want a response with a body", resp, err)
	}
	resp.Body.Close()
	if _, err := tr.RoundTrip(httptest.NewRequest("GET", "http://upstream/", nil)); err != nil {
		t.Fatalf("after closing the empty body: %v, want the permit back", err)
	}
	if calls.Load() != 4 {
		t.Fatalf("Base called %d times, want 4", calls.Load())
	}
}

// TestMiddlewareKeyedOfAnyKind: one global limit shared by every client
// (Global), and a per-client limit chained with a global one (partitioned.Func),
// both through Middleware; a partitioned.Func that returns no limiter answers 503.
func TestMiddlewareKeyedOfAnyKind(t *testing.T) {
	global, err := memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer global.Close()
	h := middleware(t, partitioned.Global(global), httplimit.Options{}, ok)
	for i, want := range []int{200, 200, 429} {
		if w := serve(h, fmt.Sprintf("192.0.2.%d:1", i+1), nil); w.Code != want {
			t.Fatalf("request %d from its own IP under one global limit of 2: %d, want %d", i, w.Code, want)
		}
	}

	perIP := perKey(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, ratelimittest.NewClock())
	total, err := memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer total.Close()
	chained := middleware(t, partitioned.Func(func(ip string) ratelimit.Limiter {
		return ratelimit.Chain(perIP.For(ip), total)
	}), httplimit.Options{}, ok)
	for i, c := range []struct {
		remote string
		want   int
	}{{"192.0.2.1:1", 200}, {"192.0.2.1:2", 429}, {"192.0.2.2:1", 200}, {"192.0.2.3:1", 429}} {
		if w := serve(chained, c.remote, nil); w.Code != c.want {
			t.Fatalf("request %d (%s) under 1 per IP and 2 in all: %d, want %d", i, c.remote, w.Code, c.want)
		}
	}
	if g, _ := perIP.Acquire(context.Background(), "192.0.2.3", 1); !g.Acquired() {
		t.Fatal("the request refused by the global limit spent its IP's permit")
	}

	none := middleware(t, partitioned.Func(func(string) ratelimit.Limiter { return nil }), httplimit.Options{}, ok)
	if w := serve(none, "192.0.2.1:1", nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a KeyedFunc without a limiter: %d, want 503", w.Code)
	}
}

// retryIs reports whether e's RetryAfter is known and in [lo, hi].
func retryIs(e *httplimit.RateLimitedError, lo, hi time.Duration) bool {
	d, ok := e.RetryAfter()
	return ok && d >= lo && d <= hi
}

// A request that waited MaxWait in vain is refused with the figures of a
// refusal: Retry-After, and the refusing policy's member with r=0.
func TestMaxWaitRefusalHasFigures(t *testing.T) {
	// The window ends within MaxWait, so the request queues; the clock
	// never moves, so MaxWait runs out while it waits.
	clock := ratelimittest.NewClockAt(time.Now())
	h := middleware(t, perKey(t, fixedwindow.Config{Limit: 1, Window: 10 * time.Millisecond}, clock), httplimit.Options{Clock: clock, MaxWait: 50 * time.Millisecond}, ok)
	if w := serve(h, "192.0.2.1:1", nil); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	w := serve(h, "192.0.2.1:1", nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Header().Get("RateLimit"), ";r=0;") {
		t.Fatalf("after MaxWait: %d, RateLimit %q, Retry-After %q; want 429 with the refusal's figures", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
}
