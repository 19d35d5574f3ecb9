package policy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/tokenbucket"
)

const (
	writeToken = "w-secret-token"
	readToken  = "r-secret-token"
)

type adminFixture struct {
	t     *testing.T
	store Store
	reg   *Registry
	srv   *httptest.Server
}

func newAdmin(t *testing.T, s Store) *adminFixture {
	t.Helper()
	reg := newRegistry(t, s, Options{})
	h, err := NewAdmin(reg, AdminOptions{Token: writeToken, ReadToken: readToken, MaxBodyBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &adminFixture{t: t, store: s, reg: reg, srv: srv}
}

// do sends a request and returns the status and the decoded JSON body.
func (f *adminFixture) do(method, path, token, body string, hdr ...string) (int, map[string]any) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			f.t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, m
}

func (f *adminFixture) snapshot() ([]Policy, []Policy) {
	f.t.Helper()
	ps, err := f.store.List(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return ps, f.reg.Policies()
}

const loginJSON = `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"key":"ip","apps":["web"]}`

func TestAdminLifecycle(t *testing.T) {
	f := newAdmin(t, NewMemoryStore())
	code, m := f.do("POST", "/policies", writeToken, loginJSON, "X-Actor", "alice")
	if code != 201 || m["version"] != 1.0 || m["created_by"] != "alice" {
		t.Fatalf("create: %d %v", code, m)
	}
	// The process that wrote applies the change before it answers.
	if p, ok := f.reg.Policy("login"); !ok || p.Version != 1 {
		t.Fatalf("registry after create: %+v", p)
	}
	code, m = f.do("GET", "/policies/login", readToken, "")
	if code != 200 || m["tokenbucket"].(map[string]any)["burst"] != 10.0 {
		t.Fatalf("get: %d %v", code, m)
	}
	code, m = f.do("GET", "/policies", readToken, "")
	if code != 200 || len(m["policies"].([]any)) != 1 {
		t.Fatalf("list: %d %v", code, m)
	}
	for range 3 {
		f.reg.Acquire(context.Background(), "login", "192.0.2.1", "web", 1)
	}
	code, m = f.do("GET", "/policies/login/keys/192.0.2.1", readToken, "")
	if code != 200 || m["remaining"] != 7.0 || m["limit"] != 10.0 || m["available"] != true {
		t.Fatalf("figures: %d %v", code, m)
	}

	// Audit fields in a body are ignored, whatever they hold: the store sets them.
	upd := strings.Replace(loginJSON, `"burst":10}`, `"burst":20}`, 1)
	upd = strings.Replace(upd, `"apps"`, `"version":1,"created_by":7,"created_at":"garbage","updated_by":"mallory","updated_at":null,"apps"`, 1)
	code, m = f.do("PUT", "/policies/login", writeToken, upd, "X-Actor", "bob")
	if code != 200 || m["version"] != 2.0 || m["updated_by"] != "bob" || m["created_by"] != "alice" {
		t.Fatalf("update: %d %v", code, m)
	}
	if p, _ := f.reg.Policy("login"); p.Config.(tokenbucket.Config).Burst != 20 {
		t.Fatalf("registry after update: %+v", p)
	}
	// The same edit again: its version is stale.
	code, m = f.do("PUT", "/policies/login", writeToken, upd)
	if code != 409 || m["field"] != "version" {
		t.Fatalf("stale update: %d %v", code, m)
	}

	code, _ = f.do("POST", "/policies/login/keys/192.0.2.1/reset", writeToken, "")
	if code != 204 {
		t.Fatalf("reset: %d", code)
	}
	code, m = f.do("GET", "/policies/login/keys/192.0.2.1", readToken, "")
	if code != 200 || m["remaining"] != 20.0 {
		t.Fatalf("figures after reset: %d %v", code, m)
	}

	code, _ = f.do("DELETE", "/policies/login?version=1", writeToken, "")
	if code != 409 {
		t.Fatalf("stale delete: %d", code)
	}
	code, _ = f.do("DELETE", "/policies/login?version=2", writeToken, "")
	if code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if _, ok := f.reg.Policy("login"); ok {
		t.Fatal("registry after delete")
	}
	code, _ = f.do("GET", "/policies/login", readToken, "")
	if code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
}

func TestAdminRefuses(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testAdminRefuses(t, NewMemoryStore()) })
	t.Run("miniredis", func(t *testing.T) { s, _ := newMiniStore(t); testAdminRefuses(t, s) })
}

func testAdminRefuses(t *testing.T, s Store) {
	f := newAdmin(t, s)
	if code, m := f.do("POST", "/policies", writeToken, loginJSON); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	withVersion := func(s string) string { return strings.Replace(s, `"apps"`, `"version":1,"apps"`, 1) }
	big := `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"key":"ip","apps":["` + strings.Repeat("a", 5000) + `"]}`
	cases := []struct {
		name, method, path, token, body string
		code                            int
		field                           string
	}{
		{"no token", "POST", "/policies", "", loginJSON, 401, ""},
		{"wrong token", "POST", "/policies", "nope", loginJSON, 401, ""},
		{"token prefix", "POST", "/policies", writeToken[:5], loginJSON, 401, ""},
		{"no token to read", "GET", "/policies", "", "", 401, ""},
		{"wrong token to read", "GET", "/policies/login", "nope", "", 401, ""},
		{"read token writes", "PUT", "/policies/login", readToken, withVersion(loginJSON), 403, ""},
		{"read token deletes", "DELETE", "/policies/login", readToken, "", 403, ""},
		{"read token resets", "POST", "/policies/login/keys/k/reset", readToken, "", 403, ""},
		{"malformed", "PUT", "/policies/login", writeToken, `{"name":"login",`, 400, ""},
		{"empty body", "PUT", "/policies/login", writeToken, ``, 400, ""},
		{"NaN", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"rate":5`, `"rate":NaN`, 1)), 400, ""},
		{"NaN string", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"rate":5`, `"rate":"NaN"`, 1)), 400, "tokenbucket.rate"},
		{"infinite rate", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"rate":5`, `"rate":1e400`, 1)), 400, "tokenbucket.rate"},
		{"negative rate", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"rate":5`, `"rate":-5`, 1)), 400, "tokenbucket.rate"},
		{"zero burst", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"burst":10`, `"burst":0`, 1)), 400, "tokenbucket.burst"},
		{"overflow", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"burst":10`, `"burst":1e20`, 1)), 400, "tokenbucket.burst"},
		{"unknown algorithm", "PUT", "/policies/login", writeToken, withVersion(`{"name":"login","algorithm":"leaky","leaky":{"rate":1},"key":"ip","apps":["web"]}`), 400, "leaky"},
		{"unknown algorithm name", "PUT", "/policies/login", writeToken, withVersion(`{"name":"login","algorithm":"leaky","key":"ip","apps":["web"]}`), 400, "algorithm"},
		{"unknown field", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"key"`, `"owner":"x","key"`, 1)), 400, "owner"},
		{"no version", "PUT", "/policies/login", writeToken, loginJSON, 400, "version"},
		{"stale version", "PUT", "/policies/login", writeToken, strings.Replace(loginJSON, `"apps"`, `"version":7,"apps"`, 1), 409, "version"},
		{"other name", "PUT", "/policies/login", writeToken, withVersion(strings.Replace(loginJSON, `"login"`, `"signup"`, 1)), 400, "name"},
		{"unknown policy", "PUT", "/policies/signup", writeToken, withVersion(strings.Replace(loginJSON, `"login"`, `"signup"`, 1)), 404, "name"},
		{"create with version", "POST", "/policies", writeToken, withVersion(strings.Replace(loginJSON, `"login"`, `"signup"`, 1)), 400, "version"},
		{"create taken", "POST", "/policies", writeToken, loginJSON, 409, "name"},
		{"oversized", "POST", "/policies", writeToken, big, 413, ""},
		{"no apps", "POST", "/policies", writeToken, strings.Replace(loginJSON, `["web"]`, `[]`, 1), 400, "apps"},
		{"bad actor", "POST", "/policies", writeToken, strings.Replace(loginJSON, `"login"`, `"signup"`, 1), 400, "X-Actor"},
		{"delete bad version", "DELETE", "/policies/login?version=x", writeToken, "", 400, "version"},
		{"delete unknown", "DELETE", "/policies/signup", writeToken, "", 404, "name"},
		{"figures of unknown", "GET", "/policies/signup/keys/k", readToken, "", 404, "name"},
		{"reset unknown", "POST", "/policies/signup/keys/k/reset", writeToken, "", 404, "name"},
		{"array body", "POST", "/policies", writeToken, `[]`, 400, ""},
		{"null body", "POST", "/policies", writeToken, `null`, 400, ""},
		{"another method", "PATCH", "/policies/login", writeToken, loginJSON, 405, ""},
		{"another method on the list", "DELETE", "/policies", writeToken, "", 405, ""},
		{"reset with GET", "GET", "/policies/login/keys/k/reset", readToken, "", 405, ""},
		{"no key", "GET", "/policies/login/keys/", readToken, "", 404, ""},
		{"unknown endpoint", "GET", "/nothing", readToken, "", 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := *f
			f.t = t
			stored, applied := f.snapshot()
			var hdr []string
			if c.name == "bad actor" {
				hdr = []string{"X-Actor", strings.Repeat("x", 200)}
			}
			code, m := f.do(c.method, c.path, c.token, c.body, hdr...)
			if code != c.code {
				t.Fatalf("got %d %v, want %d", code, m, c.code)
			}
			if m["error"] == nil || m["error"] == "" {
				t.Errorf("no error message: %v", m)
			}
			if c.field != "" && m["field"] != c.field {
				t.Errorf("field %v, want %q (%v)", m["field"], c.field, m)
			}
			stored2, applied2 := f.snapshot()
			if !reflect.DeepEqual(stored, stored2) || !reflect.DeepEqual(applied, applied2) {
				t.Errorf("the refused request changed the policies:\n%+v\n%+v", stored, stored2)
			}
		})
	}
}

func TestAdminReadOnlyStore(t *testing.T) {
	path := t.TempDir() + "/p.json"
	writeFile(t, path, `{"policies":[`+loginJSON+`]}`)
	s, err := NewFileStore(path, FileOptions{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := newAdmin(t, s)
	if code, _ := f.do("GET", "/policies/login", readToken, ""); code != 200 {
		t.Fatalf("get: %d", code)
	}
	if code, m := f.do("POST", "/policies", writeToken, strings.Replace(loginJSON, `"login"`, `"signup"`, 1)); code != 405 {
		t.Fatalf("create on a file: %d %v", code, m)
	}
	// What the request holds cannot change the answer: an update without a
	// version, a delete with a bad one, are refused as writes all the same.
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/policies/login", loginJSON},
		{"DELETE", "/policies/login?version=undefined", ""},
		{"DELETE", "/policies/login", ""},
	} {
		if code, m := f.do(c.method, c.path, writeToken, c.body); code != 405 {
			t.Errorf("%s %s on a file: %d %v; want 405", c.method, c.path, code, m)
		}
	}
	if _, err := NewAdmin(f.reg, AdminOptions{}); err == nil {
		t.Fatal("an admin without a token")
	}
}

// TestAdminRefusesBadPolicies: the admin API refuses every document Decode
// refuses, naming the same field (as the JSON names it, never a Go
// type's), and stores nothing.
func TestAdminRefusesBadPolicies(t *testing.T) {
	f := newAdmin(t, NewMemoryStore())
	for _, c := range badPolicies {
		code, m := f.do("POST", "/policies", writeToken, c.body)
		if code != 400 {
			t.Errorf("%s: %d %v; want 400", c.name, code, m)
			continue
		}
		if field, _ := m["field"].(string); c.field != "" && field != c.field {
			t.Errorf("%s: field %q (%v); want %q", c.name, field, m["error"], c.field)
		}
		if msg, _ := m["error"].(string); strings.Contains(msg, "jsonPolicy") || strings.Contains(msg, "policy.json") {
			t.Errorf("%s: %q names a Go type", c.name, msg)
		}
	}
	if ps, err := f.reg.Store().List(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("after refused documents the store holds %v, %v", ps, err)
	}
}
