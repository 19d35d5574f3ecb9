package main

import "testing"

// Another method on an endpoint, or an unknown path under /demo/, is
// answered in JSON as the endpoints' other errors, with Allow on a 405.
func TestEndpointsAnswerJSON(t *testing.T) {
	_, ts := newTestServer(t, options{})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/demo/sessions", 405, "POST"},
		{"GET", "/demo/run", 405, "POST"},
		{"POST", "/demo/policies", 405, "GET"},
		{"DELETE", "/healthz", 405, "GET"},
		{"POST", "/metrics", 405, "GET"},
		{"GET", "/demo/nothing", 404, ""},
	} {
		res := do(t, c.method, ts.URL+c.path, "")
		if res.StatusCode != c.status || res.Header.Get("Allow") != c.allow || res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %s, Allow %q, Content-Type %q; want %d, %q, JSON", c.method, c.path, res.Status, res.Header.Get("Allow"), res.Header.Get("Content-Type"), c.status, c.allow)
			continue
		}
		if e := decodeBody[apiError](t, res); e.Error == "" {
			t.Errorf("%s %s: no error message", c.method, c.path)
		}
	}
}
