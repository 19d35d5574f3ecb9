package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/policy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "test-token-0123456789"

// newTestServer serves a new server (memory backend, sample policies) on
// an httptest server; both are closed at the end of the test.
func newTestServer(t *testing.T, opts options) (*server, *httptest.Server) {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	s, err := newServer(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts
}

func post(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	return do(t, http.MethodPost, url, body, hdr...)
}

func do(t *testing.T, method, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func decodeBody[T any](t *testing.T, res *http.Response) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatalf("decoding the %d response: %v", res.StatusCode, err)
	}
	return v
}

func newSession(t *testing.T, base string) string {
	t.Helper()
	res := post(t, base+"/demo/sessions", "")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /demo/sessions: %s", res.Status)
	}
	id := decodeBody[map[string]string](t, res)["id"]
	if len(id) != 32 {
		t.Fatalf("session id %q", id)
	}
	return id
}

// event is one Server-Sent Event.
type event struct {
	name string
	data json.RawMessage
}

// readEvents reads a text/event-stream to its end.
func readEvents(t *testing.T, r io.Reader) []event {
	t.Helper()
	var evs []event
	var cur event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				evs = append(evs, cur)
			}
			cur = event{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
		default:
			t.Errorf("unexpected line in the stream: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return evs
}

// runResult is a parsed run stream.
type runResult struct {
	start     map[string]any
	decisions []decision
	done      struct {
		Allowed, Refused, Errors map[string]int
		Stopped                  string
	}
}

func runDemo(t *testing.T, base, body string) runResult {
	t.Helper()
	res := post(t, base+"/demo/run", body)
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("POST /demo/run: %s %s", res.Status, b)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var rr runResult
	evs := readEvents(t, res.Body)
	if len(evs) < 2 || evs[0].name != "start" || evs[len(evs)-1].name != "done" {
		t.Fatalf("stream of %d events does not run from start to done", len(evs))
	}
	json.Unmarshal(evs[0].data, &rr.start)
	json.Unmarshal(evs[len(evs)-1].data, &rr.done)
	for _, ev := range evs[1 : len(evs)-1] {
		if ev.name != "decision" {
			t.Fatalf("event %q in the middle of the stream", ev.name)
		}
		var d decision
		if err := json.Unmarshal(ev.data, &d); err != nil {
			t.Fatal(err)
		}
		rr.decisions = append(rr.decisions, d)
	}
	return rr
}

func TestHealthz(t *testing.T) {
	_, ts := newTestServer(t, options{})
	res := do(t, http.MethodGet, ts.URL+"/healthz", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %s", res.Status)
	}
	got := decodeBody[map[string]any](t, res)
	if got["status"] != "ok" || got["backend"] != "memory" || got["policies"] != 2.0 {
		t.Errorf("GET /healthz: %v", got)
	}
}

func TestPagesAreEmbedded(t *testing.T) {
	_, ts := newTestServer(t, options{})
	for path, want := range map[string]string{
		"/":                 "text/html",
		"/admin":            "text/html",
		"/static/demo.js":   "text/javascript",
		"/static/admin.js":  "text/javascript",
		"/static/common.js": "text/javascript",
		"/static/style.css": "text/css",
	} {
		res := do(t, http.MethodGet, ts.URL+path, "")
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %s, %s; want 200, %s", path, res.Status, res.Header.Get("Content-Type"), want)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	if res := do(t, http.MethodGet, ts.URL+"/nothing", ""); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing: %s", res.Status)
	}
}

// A burst of 30 against a fixed window of 10 and, side by side on the
// same requests, a sliding log of 10: each admits the first 10 and refuses
// 20 with a reason and a RetryAfter; the next run in the session finds the
// state the first left.
func TestDemoStream(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	body := `{"session":"` + id + `",
		"a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}},
		"b":{"algorithm":"slidinglog","slidinglog":{"limit":10,"window":"1m"}},
		"traffic":{"mode":"burst","n":30}}`
	rr := runDemo(t, ts.URL, body)
	if rr.start["requests"] != 30.0 {
		t.Errorf("start: %v", rr.start)
	}
	if len(rr.decisions) != 60 {
		t.Fatalf("%d decisions, want 60 (30 requests, 2 limiters)", len(rr.decisions))
	}
	for k, d := range rr.decisions {
		slot, i := "a", k/2
		if k%2 == 1 {
			slot = "b"
		}
		if d.Slot != slot || d.I != i || d.Limit != 10 || d.Error != "" {
			t.Fatalf("decision %d: %+v, want request %d of limiter %s, limit 10", k, d, i, slot)
		}
		if wantOK := i < 10; d.OK != wantOK {
			t.Errorf("request %d on %s: granted %v, want %v", i, slot, d.OK, wantOK)
		}
		if d.OK && d.Remaining != int64(9-i) {
			t.Errorf("request %d on %s: remaining %d, want %d", i, slot, d.Remaining, 9-i)
		}
		if !d.OK && (d.Reason != "limit reached" || d.RetryAfter == nil || *d.RetryAfter <= 0) {
			t.Errorf("refusal %d on %s: reason %q, retry after %v", i, slot, d.Reason, d.RetryAfter)
		}
	}
	for _, slot := range []string{"a", "b"} {
		if rr.done.Allowed[slot] != 10 || rr.done.Refused[slot] != 20 {
			t.Errorf("done: %+v", rr.done)
		}
	}
	// The same limiters: nothing left.
	one := strings.Replace(body, `"mode":"burst","n":30`, `"mode":"one"`, 1)
	if rr := runDemo(t, ts.URL, one); len(rr.decisions) != 2 || rr.decisions[0].OK || rr.decisions[1].OK {
		t.Errorf("one more request after the burst: %+v", rr.decisions)
	}
	// Other parameters make other limiters, from their initial state.
	other := strings.Replace(one, `"limit":10,"window":"1m"}},
		"b"`, `"limit":11,"window":"1m"}},
		"b"`, 1)
	if rr := runDemo(t, ts.URL, other); len(rr.decisions) != 2 || !rr.decisions[0].OK || rr.decisions[1].OK {
		t.Errorf("a new fixed window and the old sliding log: %+v", rr.decisions)
	}
}

// A run refused as invalid (a window too long for the edge scenario)
// leaves the session's limiters as they were.
func TestDemoRefusedRunKeepsLimiters(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	run := func(a, b, traffic string) string {
		body := `{"session":"` + id + `","a":` + a
		if b != "" {
			body += `,"b":` + b
		}
		return body + `,"traffic":` + traffic + `}`
	}
	fw5 := `{"algorithm":"fixedwindow","fixedwindow":{"limit":5,"window":"1h"}}`
	fw6 := `{"algorithm":"fixedwindow","fixedwindow":{"limit":6,"window":"1h"}}`
	if rr := runDemo(t, ts.URL, run(fw5, "", `{"mode":"burst","n":5}`)); rr.done.Allowed["a"] != 5 {
		t.Fatalf("a burst of 5 on a fixed window of 5: %+v", rr.done)
	}
	if res := post(t, ts.URL+"/demo/run", run(fw6, "", `{"mode":"edge","n":5}`)); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("an edge run on a window of an hour: %s, want 400", res.Status)
	}
	if rr := runDemo(t, ts.URL, run(fw5, "", `{"mode":"one"}`)); len(rr.decisions) != 1 || rr.decisions[0].OK {
		t.Errorf("the spent fixed window after refused runs: %+v; want it still spent", rr.decisions)
	}
}

// A steady run spreads its requests over its duration.
func TestDemoSteady(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	start := time.Now()
	rr := runDemo(t, ts.URL, `{"session":"`+id+`","a":{"algorithm":"tokenbucket","tokenbucket":{"rate":1,"burst":3}},
		"traffic":{"mode":"steady","rate":20,"seconds":0.5}}`)
	if len(rr.decisions) != 10 {
		t.Fatalf("%d decisions, want 10", len(rr.decisions))
	}
	if last := rr.decisions[9].T; last < 450 {
		t.Errorf("the 10th request at %.1f ms, want 450 ms or later", last)
	}
	if elapsed := time.Since(start); elapsed < 450*time.Millisecond {
		t.Errorf("the run took %v", elapsed)
	}
	if rr.done.Allowed["a"] < 3 || rr.done.Allowed["a"] > 4 {
		t.Errorf("a bucket of 3 at 1/s admitted %d of 10 in 0.5 s", rr.done.Allowed["a"])
	}
}

// At a window edge a fixed window of 10 per second can admit 20 within
// 200 ms; a sliding log of 10 per second admits 10 whenever they come.
func TestDemoWindowEdge(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	rr := runDemo(t, ts.URL, `{"session":"`+id+`",
		"a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}},
		"b":{"algorithm":"slidinglog","slidinglog":{"limit":10,"window":"1s"}},
		"traffic":{"mode":"edge","n":10}}`)
	if rr.start["edge_ms"] != 400.0 || rr.start["slice_ms"] != 200.0 {
		t.Errorf("start: %v", rr.start)
	}
	if rr.done.Allowed["b"] != 10 {
		t.Errorf("the sliding log admitted %d of 20, want 10", rr.done.Allowed["b"])
	}
	// On a loaded machine the first half may be late, past the edge.
	if a := rr.done.Allowed["a"]; a < 10 || a > 20 {
		t.Errorf("the fixed window admitted %d of 20", a)
	}
	t.Logf("at the window edge (%.1f ms): fixed window admitted %d, sliding log %d; the halves sent at %.1f to %.1f ms and %.1f to %.1f ms",
		rr.start["edge_ms"], rr.done.Allowed["a"], rr.done.Allowed["b"],
		rr.decisions[0].T, rr.decisions[19].T, rr.decisions[20].T, rr.decisions[39].T)
}

// The demo spends a stored policy on a key of its own, and never changes
// the policy.
func TestDemoPolicyReadOnly(t *testing.T) {
	s, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	res := do(t, http.MethodGet, ts.URL+"/demo/policies", "")
	list := decodeBody[struct{ Policies []demoPolicy }](t, res)
	if len(list.Policies) != 1 || list.Policies[0].Name != "demo" {
		t.Fatalf("GET /demo/policies: %+v (want only the policy that allows the demo)", list)
	}
	before, _ := s.reg.Policy("demo")
	rr := runDemo(t, ts.URL, `{"session":"`+id+`","a":{"policy":"demo","key":"visitor-1"},"traffic":{"mode":"burst","n":30}}`)
	if rr.done.Allowed["a"] != 10 || rr.done.Refused["a"] != 20 {
		t.Errorf("30 against the demo policy's 10: %+v", rr.done)
	}
	after, _ := s.reg.Policy("demo")
	if after.Version != before.Version || after.Config != before.Config {
		t.Errorf("the demo changed the policy: %+v -> %+v", before, after)
	}
	lease, err := s.reg.Peek(context.Background(), "demo", "demo:visitor-1")
	if err != nil || lease.Remaining() != 0 {
		t.Errorf("the demo's key: %v remaining, %v", lease.Remaining(), err)
	}
	if lease, _ := s.reg.Peek(context.Background(), "demo", "visitor-1"); lease.Remaining() != 10 {
		t.Errorf("a caller's own key was spent by the demo: %d remaining", lease.Remaining())
	}
	for _, m := range []string{http.MethodPut, http.MethodDelete} {
		if res := do(t, m, ts.URL+"/demo/policies", `{}`); res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /demo/policies: %s", m, res.Status)
		}
	}
}

func TestDemoValidation(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	fw := `{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}}`
	burst := `{"mode":"burst","n":5}`
	body := func(a, traffic string) string {
		return `{"session":"` + id + `","a":` + a + `,"traffic":` + traffic + `}`
	}
	for _, c := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"no session", `{"a":` + fw + `,"traffic":` + burst + `}`, 400, "session"},
		{"unknown session", `{"session":"feed","a":` + fw + `,"traffic":` + burst + `}`, 404, "session"},
		{"no limiter", `{"session":"` + id + `","traffic":` + burst + `}`, 400, "a"},
		{"unknown field", `{"session":"` + id + `","a":` + fw + `,"traffic":` + burst + `,"admin":true}`, 400, "admin"},
		{"malformed", `{"session":`, 400, ""},
		{"negative limit", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":-1,"window":"1s"}}`, burst), 400, "a.fixedwindow.limit"},
		{"limit too large", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":100000,"window":"1s"}}`, burst), 400, "a.fixedwindow.limit"},
		{"window too long", body(`{"algorithm":"slidinglog","slidinglog":{"limit":10,"window":"2h"}}`, burst), 400, "a.slidinglog.window"},
		{"rate too high", body(`{"algorithm":"tokenbucket","tokenbucket":{"rate":1e9,"burst":10}}`, burst), 400, "a.tokenbucket.rate"},
		{"limit not a number", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":"ten","window":"1s"}}`, burst), 400, "a.fixedwindow.limit"},
		{"no algorithm", body(`{"fixedwindow":{"limit":10,"window":"1s"}}`, burst), 400, "a.algorithm"},
		{"unknown algorithm", body(`{"algorithm":"leakybucket"}`, burst), 400, "a.algorithm"},
		{"second limiter invalid", `{"session":"` + id + `","a":` + fw + `,"b":{"algorithm":"concurrency","concurrency":{"limit":0}},"traffic":` + burst + `}`, 400, "b.concurrency.limit"},
		{"unknown policy", body(`{"policy":"nope","key":"k"}`, burst), 400, "a.policy"},
		{"policy not for the demo", body(`{"policy":"api","key":"k"}`, burst), 400, "a.policy"},
		{"empty key", body(`{"policy":"demo","key":""}`, burst), 400, "a.key"},
		{"key with braces", body(`{"policy":"demo","key":"{x}"}`, burst), 400, "a.key"},
		{"unknown mode", body(fw, `{"mode":"flood"}`), 400, "traffic.mode"},
		{"burst of 0", body(fw, `{"mode":"burst","n":0}`), 400, "traffic.n"},
		{"burst too large", body(fw, `{"mode":"burst","n":1001}`), 400, "traffic.n"},
		{"n not a number", body(fw, `{"mode":"burst","n":"5"}`), 400, "traffic.n"},
		{"steady too fast", body(fw, `{"mode":"steady","rate":1000,"seconds":1}`), 400, "traffic.rate"},
		{"steady too long", body(fw, `{"mode":"steady","rate":10,"seconds":3600}`), 400, "traffic.seconds"},
		{"steady of nothing", body(fw, `{"mode":"steady","rate":1,"seconds":0.5}`), 400, "traffic.seconds"},
		{"hold too long", body(fw, `{"mode":"one","hold":"1h"}`), 400, "traffic.hold"},
		{"hold not a duration: a number", body(fw, `{"mode":"one","hold":5}`), 400, "traffic.hold"},
		{"hold not a duration: a word", body(fw, `{"mode":"one","hold":"abc"}`), 400, "traffic.hold"},
		{"trailing brace", body(fw, burst) + `}`, 400, ""},
		{"empty body", ``, 400, ""},
		{"an array", `[]`, 400, ""},
		{"edge of a long window", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}}`, `{"mode":"edge","n":5}`), 400, "traffic.mode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := post(t, ts.URL+"/demo/run", c.body)
			if res.StatusCode != c.status {
				t.Fatalf("%s, want %d", res.Status, c.status)
			}
			e := decodeBody[apiError](t, res)
			if e.Field != c.field || e.Error == "" {
				t.Errorf("error %+v, want the field %q named", e, c.field)
			}
			if strings.HasPrefix(e.Error, ":") || strings.Contains(e.Error, "struct") || strings.HasPrefix(c.name, "hold not") && !strings.Contains(e.Error, "duration") {
				t.Errorf("error %q: not the user's words", e.Error)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	big := `{"session":"` + id + `","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}},"traffic":{"mode":"one"},"pad":"` + strings.Repeat("x", maxDemoBody) + `"}`
	if res := post(t, ts.URL+"/demo/run", big); res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a demo body over %d bytes: %s", maxDemoBody, res.Status)
	}
	huge := `{"name":"` + strings.Repeat("x", maxBodyBytes) + `"}`
	res := post(t, ts.URL+"/api/policies", huge, "Authorization", "Bearer "+testToken)
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("an admin body over %d bytes: %s", maxBodyBytes, res.Status)
	}
	if res := post(t, ts.URL+"/demo/sessions", huge); res.StatusCode != http.StatusCreated {
		t.Errorf("POST /demo/sessions reads no body: %s", res.Status)
	}
}

// The admin API is reached through the server and needs the token; a
// refused request changes nothing.
func TestAdminAuth(t *testing.T) {
	s, ts := newTestServer(t, options{})
	update := `{"name":"demo","algorithm":"fixedwindow","fixedwindow":{"limit":1,"window":"1m"},"key":"user","apps":["demo"],"version":1}`
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
	}{
		{"no token", "GET", "/api/policies", "", nil},
		{"wrong token", "GET", "/api/policies", "", []string{"Authorization", "Bearer wrong"}},
		{"token as basic auth", "GET", "/api/policies", "", []string{"Authorization", "Basic " + testToken}},
		{"write without token", "PUT", "/api/policies/demo", update, nil},
		{"write with a wrong token", "PUT", "/api/policies/demo", update, []string{"Authorization", "Bearer " + testToken + "x"}},
		{"delete with a wrong token", "DELETE", "/api/policies/demo", "", []string{"Authorization", "Bearer x"}},
		{"reset with a wrong token", "POST", "/api/policies/demo/keys/k/reset", "", []string{"Authorization", "Bearer x"}},
	} {
		res := do(t, c.method, ts.URL+c.path, c.body, c.hdr...)
		if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %s, WWW-Authenticate %q; want 401 and the header", c.name, res.Status, res.Header.Get("WWW-Authenticate"))
		}
	}
	if p, _ := s.reg.Policy("demo"); p.Version != 1 || p.Config.(fixedwindow.Config).Limit != 10 {
		t.Fatalf("refused writes changed the policy: %+v", p)
	}
	res := do(t, "PUT", ts.URL+"/api/policies/demo", update, "Authorization", "Bearer "+testToken, "X-Actor", "alice")
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("PUT with the token: %s %s", res.Status, b)
	}
	if p, _ := s.reg.Policy("demo"); p.Version != 2 || p.UpdatedBy != "alice" || p.Config.(fixedwindow.Config).Limit != 1 {
		t.Errorf("after the update: %+v", p)
	}
	res = do(t, "PUT", ts.URL+"/api/policies/demo", strings.Replace(update, `"limit":1`, `"limit":0`, 1)+"", "Authorization", "Bearer "+testToken)
	if e := decodeBody[apiError](t, res); res.StatusCode != http.StatusBadRequest || e.Field != "fixedwindow.limit" {
		t.Errorf("an invalid limit: %s %+v", res.Status, e)
	}
}

// Close closes the demo's limiters and the registry; a new session is
// refused after it.
func TestCloseClosesLimiters(t *testing.T) {
	s, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	runDemo(t, ts.URL, `{"session":"`+id+`","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}},
		"b":{"algorithm":"concurrency","concurrency":{"limit":2}},"traffic":{"mode":"one"}}`)
	s.demo.mu.Lock()
	sess := s.demo.sessions[id]
	s.demo.mu.Unlock()
	sess.mu.Lock()
	slots := []*slot{sess.slots["a"], sess.slots["b"]}
	sess.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, sl := range slots {
		if _, err := sl.acquire(context.Background()); !errors.Is(err, ratelimit.ErrClosed) {
			t.Errorf("limiter %d after Close: %v, want ErrClosed", i, err)
		}
	}
	if _, err := s.reg.Acquire(context.Background(), "demo", "k", "demo", 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("the registry after Close: %v, want ErrClosed", err)
	}
	if res := post(t, ts.URL+"/demo/sessions", ""); res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a new session after Close: %s", res.Status)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close twice: %v", err)
	}
}

// run serves until its context ends, then lets a demo stream finish with
// a "done" event and closes everything.
func TestRunGracefulShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	ready := make(chan string, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- run(ctx, []string{"-addr", "127.0.0.1:0", "-token", testToken}, &stdout, &stderr, func(u string) { ready <- u })
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-ran:
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), base+"/admin") {
		t.Errorf("stdout %q does not give the URL", stdout.String())
	}
	id := newSession(t, base)
	res := post(t, base+"/demo/run", `{"session":"`+id+`","a":{"algorithm":"tokenbucket","tokenbucket":{"rate":100,"burst":10}},
		"traffic":{"mode":"steady","rate":10,"seconds":30}}`)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST /demo/run: %s", res.Status)
	}
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: start\n" {
		t.Fatalf("the stream starts with %q, %v", line, err)
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("run after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10 s after its context ended")
	}
	evs := readEvents(t, br)
	last := evs[len(evs)-1]
	if last.name != "done" || !strings.Contains(string(last.data), "shutting down") {
		t.Errorf("the stream ended with %s %s", last.name, last.data)
	}
	if len(evs) > 20 {
		t.Errorf("%d events: the run went on", len(evs))
	}
	log := stderr.String()
	for _, want := range []string{"msg=request method=POST path=/demo/run status=200", "shutting down", "msg=stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, testToken) {
		t.Errorf("the log holds the token:\n%s", log)
	}
}

func TestRunFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-nope"}, &stdout, &stderr, nil); !errors.Is(err, errUsage) {
		t.Errorf("an unknown flag: %v", err)
	}
	if err := run(context.Background(), []string{"extra"}, &stdout, &stderr, nil); !errors.Is(err, errUsage) {
		t.Errorf("an argument: %v", err)
	}
	if err := run(context.Background(), []string{"-policies", filepath.Join(t.TempDir(), "missing.json")}, &stdout, &stderr, nil); err == nil {
		t.Error("a missing policy file: no error")
	}
	// Without a token one is made and printed once, on stderr.
	t.Setenv("LIMITKIT_TOKEN", "")
	ctx, cancel := context.WithCancel(context.Background())
	stderr.Reset()
	stdout.Reset()
	if err := run(ctx, []string{"-addr", "127.0.0.1:0"}, &stdout, &stderr, func(string) { cancel() }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "admin token") || strings.Contains(stdout.String(), "token") {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// A policy file is served read-only: the admin API answers 405 to writes.
func TestPolicyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.json")
	os.WriteFile(path, []byte(`{"policies":[{"name":"demo","algorithm":"slidinglog","slidinglog":{"limit":3,"window":"1m"},"key":"user","apps":["*"]}]}`), 0o600)
	fstore, err := policy.NewFileStore(path, policy.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ts := newTestServer(t, options{Store: fstore})
	id := newSession(t, ts.URL)
	rr := runDemo(t, ts.URL, `{"session":"`+id+`","a":{"policy":"demo","key":"k"},"traffic":{"mode":"burst","n":5}}`)
	if rr.done.Allowed["a"] != 3 {
		t.Errorf("the file's policy of 3 admitted %d of 5", rr.done.Allowed["a"])
	}
	res := do(t, "PUT", ts.URL+"/api/policies/demo", `{"name":"demo","algorithm":"slidinglog","slidinglog":{"limit":30,"window":"1m"},"key":"user","apps":["*"],"version":1}`,
		"Authorization", "Bearer "+testToken)
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("a write to the file store: %s", res.Status)
	}
}

// With Redis the policies and the demo's limiters live in Redis.
func TestRedisBackend(t *testing.T) {
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	defer client.Close()
	s, ts := newTestServer(t, options{Redis: client})
	if s.backendName() != "redis" {
		t.Errorf("backend %q", s.backendName())
	}
	if !mr.Exists("limitkit:policy:{store}:defs") {
		t.Errorf("the sample policies are not in Redis: %v", mr.Keys())
	}
	id := newSession(t, ts.URL)
	rr := runDemo(t, ts.URL, `{"session":"`+id+`","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}},
		"b":{"policy":"demo","key":"v"},"traffic":{"mode":"burst","n":30}}`)
	for _, slot := range []string{"a", "b"} {
		if rr.done.Allowed[slot] != 10 || rr.done.Refused[slot] != 20 {
			t.Errorf("on Redis: %+v", rr.done)
		}
	}
	var demoKeys int
	for _, k := range mr.Keys() {
		if strings.HasPrefix(k, "limitkit:demo:{"+id+":a}") {
			demoKeys++
		}
	}
	if demoKeys == 0 {
		t.Errorf("no demo limiter state in Redis: %v", mr.Keys())
	}
	// A second server on the same Redis finds the policies there.
	s2, err := newServer(context.Background(), options{Token: testToken, Redis: client})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if p, ok := s2.reg.Policy("demo"); !ok || p.Version != 1 {
		t.Errorf("the second server's demo policy: %+v %v", p, ok)
	}
}

// Sessions are bounded: an idle one makes room for a new one (its
// limiters closed), and a session expires after its idle time.
func TestDemoSessionBounds(t *testing.T) {
	s, ts := newTestServer(t, options{})
	s.demo.maxSessions = 2
	fw := `"a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}},"traffic":{"mode":"one"}}`
	first := newSession(t, ts.URL)
	runDemo(t, ts.URL, `{"session":"`+first+`",`+fw)
	s.demo.mu.Lock()
	old := s.demo.sessions[first].slots["a"]
	s.demo.mu.Unlock()
	newSession(t, ts.URL)
	newSession(t, ts.URL) // the least recently used, first, makes room
	if _, err := old.acquire(context.Background()); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("the evicted session's limiter: %v, want ErrClosed", err)
	}
	if res := post(t, ts.URL+"/demo/run", `{"session":"`+first+`",`+fw); res.StatusCode != http.StatusNotFound {
		t.Errorf("a run in the evicted session: %s", res.Status)
	}
	s.demo.mu.Lock()
	n := len(s.demo.sessions)
	s.demo.mu.Unlock()
	if n != 2 {
		t.Errorf("%d sessions held, want 2", n)
	}

	s.demo.sessionIdle = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	newSession(t, ts.URL)
	s.demo.mu.Lock()
	n = len(s.demo.sessions)
	s.demo.mu.Unlock()
	if n != 1 {
		t.Errorf("%d sessions held after the others expired, want 1", n)
	}
}

// A session runs at most maxSessionRuns at once, and a run may not
// replace the limiters another run of the session is using.
func TestDemoRunsBounded(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	slow := `{"session":"` + id + `","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}},"traffic":{"mode":"steady","rate":1,"seconds":30}}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range maxSessionRuns {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/demo/run", strings.NewReader(slow))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("run: %s", res.Status)
		}
	}
	if res := post(t, ts.URL+"/demo/run", slow); res.StatusCode != http.StatusConflict {
		t.Errorf("a third run at once: %s", res.Status)
	}
	cancel()
	id2 := newSession(t, ts.URL)
	slow2 := strings.Replace(slow, id, id2, 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	req, _ := http.NewRequestWithContext(ctx2, "POST", ts.URL+"/demo/run", strings.NewReader(slow2))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	other := strings.Replace(slow2, `"limit":10`, `"limit":9`, 1)
	if res := post(t, ts.URL+"/demo/run", other); res.StatusCode != http.StatusConflict {
		t.Errorf("other limiters while a run is in progress: %s", res.Status)
	}
}

// A concurrency limit's grants are held for the run's hold, then released.
func TestDemoConcurrency(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	body := `{"session":"` + id + `","a":{"algorithm":"concurrency","concurrency":{"limit":2}},"traffic":{"mode":"burst","n":5,"hold":"100ms"}}`
	rr := runDemo(t, ts.URL, body)
	if rr.done.Allowed["a"] != 2 || rr.done.Refused["a"] != 3 {
		t.Fatalf("5 against 2 held: %+v", rr.done)
	}
	if d := rr.decisions[4]; d.Reason != "limit reached" || d.RetryAfter != nil {
		t.Errorf("a concurrency refusal: %+v (RetryAfter is unknown)", d)
	}
	time.Sleep(300 * time.Millisecond)
	if rr := runDemo(t, ts.URL, body); rr.done.Allowed["a"] != 2 {
		t.Errorf("after the hold: %+v", rr.done)
	}
}

// -redis points the command at Redis.
func TestRunRedisFlag(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	var health map[string]any
	err := run(ctx, []string{"-addr", "127.0.0.1:0", "-token", testToken, "-redis", mr.Addr()}, &stdout, &stderr, func(base string) {
		defer cancel()
		res, err := http.Get(base + "/healthz")
		if err != nil {
			t.Error(err)
			return
		}
		defer res.Body.Close()
		json.NewDecoder(res.Body).Decode(&health)
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if health["backend"] != "redis" || !strings.Contains(stdout.String(), "(redis backend)") {
		t.Errorf("healthz %v, stdout %q", health, stdout.String())
	}
	if !mr.Exists("limitkit:policy:{store}:defs") {
		t.Errorf("no policies in Redis: %v", mr.Keys())
	}
}

// An unreachable Redis is an error at start-up, within the start-up bound.
func TestRunRedisUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"-addr", "127.0.0.1:0", "-token", testToken, "-redis", addr}, &stdout, &stderr, func(string) { t.Error("served without Redis") })
	if err == nil || ctx.Err() != nil {
		t.Errorf("run without Redis: %v (context: %v)", err, ctx.Err())
	}
}

// metric reads the value of the series of name whose labels include
// every one of labels from GET /metrics.
func metric(t *testing.T, base, name string, labels ...string) string {
	t.Helper()
	res := do(t, http.MethodGet, base+"/metrics", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var found []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			found = append(found, line[strings.LastIndexByte(line, ' ')+1:])
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d series of %s with %v", len(found), name, labels)
	}
	return found[0]
}

// /metrics counts the stored policies' decisions; recording keeps the
// registry's reset and its change of limit in place (state kept).
func TestMetrics(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	burst := `{"session":"` + id + `","a":{"policy":"demo","key":"v"},"traffic":{"mode":"burst","n":30}}`
	runDemo(t, ts.URL, burst)
	demo := `ratelimit_policy="demo"`
	if got := metric(t, ts.URL, "ratelimit_requests_total", demo, `ratelimit_result="acquired"`, `ratelimit_algorithm="fixedwindow"`, `ratelimit_backend="memory"`); got != "10" {
		t.Errorf("acquired: %s, want 10", got)
	}
	if got := metric(t, ts.URL, "ratelimit_requests_total", demo, `ratelimit_result="refused"`, `ratelimit_reason="limit"`); got != "20" {
		t.Errorf("refused: %s, want 20", got)
	}

	// Raised from 10 to 15 in place: the key's count of 10 is kept.
	auth := []string{"Authorization", "Bearer " + testToken}
	res := do(t, "PUT", ts.URL+"/api/policies/demo", `{"name":"demo","algorithm":"fixedwindow","fixedwindow":{"limit":15,"window":"1m"},"key":"user","apps":["demo"],"version":1}`, auth...)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s", res.Status)
	}
	if rr := runDemo(t, ts.URL, burst); rr.done.Allowed["a"] != 5 {
		t.Errorf("after raising the limit to 15, the key admitted %d more, want 5 (its count kept)", rr.done.Allowed["a"])
	}
	if res := do(t, "POST", ts.URL+"/api/policies/demo/keys/demo:v/reset", "", auth...); res.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %s", res.Status)
	}
	res = do(t, "GET", ts.URL+"/api/policies/demo/keys/demo:v", "", auth...)
	if f := decodeBody[policy.Figures](t, res); f.Remaining != 15 || f.Limit != 15 {
		t.Errorf("after the reset: %+v", f)
	}
	if got := metric(t, ts.URL, "ratelimit_requests_total", demo, `ratelimit_result="acquired"`); got != "15" {
		t.Errorf("acquired: %s, want 15", got)
	}
}
