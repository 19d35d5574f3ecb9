package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// A run's body over the bound is a 413 also when it is a valid run
// followed by white space (the bound is met looking for trailing data).
func TestRunBodyOverBoundAfterTheObject(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	run := `{"session":"` + id + `","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}},"traffic":{"mode":"one"}}`
	res := post(t, ts.URL+"/demo/run", run+strings.Repeat(" ", 20<<10))
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a run followed by 20 KiB of spaces: %s %+v, want 413", res.Status, decodeBody[apiError](t, res))
	}
	if rr := runDemo(t, ts.URL, run+strings.Repeat(" ", 100)); rr.done.Allowed["a"] != 1 {
		t.Errorf("a run followed by 100 spaces: %+v", rr.done)
	}
}

// A key given twice in a run's body is refused, naming it, wherever it is.
func TestRunDuplicateKeys(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	for _, c := range []struct{ body, field string }{
		{`{"session":"` + id + `","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}},"traffic":{"mode":"burst","n":5,"n":1000}}`, "traffic.n"},
		{`{"session":"` + id + `","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s","limit":1000}},"traffic":{"mode":"one"}}`, "a.fixedwindow.limit"},
		{`{"session":"` + id + `","a":{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}},"a":{"policy":"demo","key":"k"},"traffic":{"mode":"one"}}`, "a"},
		{`{"session":"` + id + `","a":{"policy":"demo","key":"k","key":"j"},"traffic":{"mode":"one"}}`, "a.key"},
	} {
		res := post(t, ts.URL+"/demo/run", c.body)
		e := decodeBody[apiError](t, res)
		if res.StatusCode != http.StatusBadRequest || e.Field != c.field || !strings.Contains(e.Error, c.field) || !strings.Contains(e.Error, "twice") {
			t.Errorf("%s: %s %+v, want 400 naming %s given twice", c.body, res.Status, e, c.field)
		}
	}
}

// goSyntax is what the demo's messages must not say: Go's names and
// notation, which a visitor cannot type.
var goSyntax = regexp.MustCompile(`rate\.Inf|2\^53|\[-?\d+, |\(0, |\d+h0m|\d+m0s|\bnot a JSON number\b|ratelimit: invalid config|\b(Rate|Burst|PerPeriod|Period|Limit|Window|Segments|Queue)\b|struct|int64|float64|time\.Duration`)

// The demo's refusals are in the page's words: a wrong type names the
// value, its JSON type and the type wanted; durations are written as the
// page takes them.
func TestRunRefusalsInPageWords(t *testing.T) {
	_, ts := newTestServer(t, options{})
	id := newSession(t, ts.URL)
	body := func(a, traffic string) string {
		return `{"session":"` + id + `","a":` + a + `,"traffic":` + traffic + `}`
	}
	fw := `{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1s"}}`
	for _, c := range []struct{ name, body, field, says string }{
		{"rate out of range", body(fw, `{"mode":"steady","rate":1e400,"seconds":1}`), "traffic.rate", "traffic.rate 1e400: is out of range for a number"},
		{"n a fraction", body(fw, `{"mode":"burst","n":1.5}`), "traffic.n", "traffic.n 1.5: must be a whole number"},
		{"n a string", body(fw, `{"mode":"burst","n":"5"}`), "traffic.n", `traffic.n "5": must be an integer, not a string`},
		{"hold a number", body(fw, `{"mode":"one","hold":5}`), "traffic.hold", `must be a duration such as "1m30s", not a number`},
		{"hold too long", body(fw, `{"mode":"one","hold":"1h"}`), "traffic.hold", "must be 0 to 5s"},
		{"rate of 0", body(`{"algorithm":"tokenbucket","tokenbucket":{"rate":0,"burst":10}}`, `{"mode":"one"}`), "a.tokenbucket.rate", "a.tokenbucket.rate 0: must be above 0"},
		{"limit of 0", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":0,"window":"1s"}}`, `{"mode":"one"}`), "a.fixedwindow.limit", "must be an integer from 1 to 9007199254740992"},
		{"limit a string", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":"ten","window":"1s"}}`, `{"mode":"one"}`), "a.fixedwindow.limit", `"ten": must be an integer, not a string`},
		{"window too long", body(`{"algorithm":"slidinglog","slidinglog":{"limit":10,"window":"90m"}}`, `{"mode":"one"}`), "a.slidinglog.window", "a.slidinglog.window: at most 1h in the demo"},
		{"edge of a minute", body(`{"algorithm":"fixedwindow","fixedwindow":{"limit":10,"window":"1m"}}`, `{"mode":"edge","n":5}`), "traffic.mode", "needs a window of at most 10s, not 1m"},
		{"segments unsplit", body(`{"algorithm":"slidingwindow","slidingwindow":{"limit":10,"window":"1m","segments":7}}`, `{"mode":"one"}`), "a.slidingwindow.window", "must split into 7 segments"},
		{"stored policy, key a number", body(`{"policy":"demo","key":5}`, `{"mode":"one"}`), "a.key", `a.key 5: must be a string, not a number`},
	} {
		res := post(t, ts.URL+"/demo/run", c.body)
		e := decodeBody[apiError](t, res)
		if res.StatusCode != http.StatusBadRequest || e.Field != c.field || !strings.Contains(e.Error, c.says) {
			t.Errorf("%s: %s %+v, want 400 naming %s and saying %q", c.name, res.Status, e, c.field, c.says)
		}
		if s := goSyntax.FindString(e.Error); s != "" {
			t.Errorf("%s: %q says %q", c.name, e.Error, s)
		}
	}
}
