package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAlgorithmsScript: /algorithms.js describes every registered
// algorithm from its descriptor, a calendar quota's period and first day
// as lists of their choices, for the pages to build its form.
func TestAlgorithmsScript(t *testing.T) {
	_, ts := newTestServer(t, options{})
	res := do(t, http.MethodGet, ts.URL+"/algorithms.js", "")
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET /algorithms.js: %s, %s", res.Status, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`{"name":"quota","fields":[{"name":"limit","kind":"count"},{"name":"period","kind":"text","choices":["day","week","month","year"]},`,
		`{"name":"timezone","kind":"text"}`,
		`{"name":"fixedwindow","fields":[{"name":"limit","kind":"count"},{"name":"window","kind":"duration"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/algorithms.js lacks %s:\n%s", want, b)
		}
	}
}

// TestDemoQuota: the demo runs a calendar quota, given in the policies'
// JSON form: a burst of 5 against 3 a day in Paris grants 3.
func TestDemoQuota(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	rr := runDemo(t, ts.URL, `{"session":"`+id+`","a":{"algorithm":"quota","quota":{"limit":3,"period":"day","timezone":"Europe/Paris"}},
		"traffic":{"mode":"burst","n":5}}`)
	if rr.done.Allowed["a"] != 3 || rr.done.Refused["a"] != 2 {
		t.Fatalf("a burst of 5 on a quota of 3 a day: %+v", rr.done)
	}
	if res := post(t, ts.URL+"/demo/run", `{"session":"`+id+`","a":{"algorithm":"quota","quota":{"limit":3,"period":"fortnight"}},"traffic":{"mode":"one"}}`); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a quota per fortnight: %s, want 400", res.Status)
	}
}

// TestMetricsOfAQuota: a quota policy's decisions are counted under its
// algorithm's name, which the descriptor gives.
func TestMetricsOfAQuota(t *testing.T) {
	s, ts := newTestServer(t, options{})
	res := post(t, ts.URL+"/api/policies", `{"name":"plan","algorithm":"quota","quota":{"limit":1,"period":"month","timezone":"Europe/Paris"},"key":"user","apps":["web"]}`,
		"Authorization", "Bearer "+testToken)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s", res.Status)
	}
	for range 2 {
		if _, err := s.reg.Acquire(context.Background(), "plan", "u", "web", 1); err != nil {
			t.Fatal(err)
		}
	}
	for result, want := range map[string]string{"acquired": "1", "refused": "1"} {
		if got := metric(t, ts.URL, "ratelimit_requests_total", `ratelimit_policy="plan"`, `ratelimit_algorithm="quota"`, `ratelimit_result="`+result+`"`); got != want {
			t.Errorf("%s under plan, algorithm quota: %s, want %s", result, got, want)
		}
	}
}
