package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/fixedwindow"
)

// A body over MaxBodyBytes is a 413 also when it is a valid policy followed
// by white space: the bound is met while looking for trailing data, and
// that is no trailing data.
func TestAdminBodyOverBoundAfterThePolicy(t *testing.T) {
	f := newAdmin(t, NewMemoryStore()) // MaxBodyBytes 4096
	spaces := strings.Repeat(" ", 8192)
	code, m := f.do("POST", "/policies", writeToken, loginJSON+spaces)
	if code != 413 {
		t.Fatalf("create with 8,192 spaces after the policy: %d %v, want 413", code, m)
	}
	if ps, _ := f.store.List(context.Background()); len(ps) != 0 {
		t.Fatalf("the refused create stored %v", ps)
	}
	if code, m := f.do("POST", "/policies", writeToken, loginJSON); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	update := strings.Replace(loginJSON, `"rate":5`, `"rate":7`, 1)
	update = strings.Replace(update, `"apps"`, `"version":1,"apps"`, 1)
	if code, m := f.do("PUT", "/policies/login", writeToken, update+spaces); code != 413 {
		t.Fatalf("update with 8,192 spaces after the policy: %d %v, want 413", code, m)
	}
	// Within the bound, white space after the policy is no trailing data.
	if code, m := f.do("PUT", "/policies/login", writeToken, update+strings.Repeat(" ", 100)); code != 200 {
		t.Fatalf("update with 100 spaces after the policy: %d %v, want 200", code, m)
	}
}

// A key given twice is refused, naming it (encoding/json keeps the last),
// at any depth, and the refusal stores nothing.
func TestDuplicateKeysRefused(t *testing.T) {
	for _, c := range []struct{ doc, field string }{
		{`{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"tokenbucket":{"rate":99999,"burst":10},"key":"ip","apps":["web"]}`, "tokenbucket"},
		{`{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10,"rate":99999},"key":"ip","apps":["web"]}`, "tokenbucket.rate"},
		{`{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10,"queue":{"limit":1,"limit":2}},"key":"ip","apps":["web"]}`, "tokenbucket.queue.limit"},
		{`{"name":"login","name":"other","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"key":"ip","apps":["web"]}`, "name"},
	} {
		_, err := Decode(strings.NewReader(c.doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "twice") {
			t.Errorf("%s: got %v, want a field error naming %s given twice", c.doc, err, c.field)
		}
	}

	f := newAdmin(t, NewMemoryStore())
	if code, m := f.do("POST", "/policies", writeToken, loginJSON); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	twice := `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"tokenbucket":{"rate":99999,"burst":10},"key":"ip","version":1,"apps":["web"]}`
	code, m := f.do("PUT", "/policies/login", writeToken, twice)
	if code != 400 || m["field"] != "tokenbucket" {
		t.Fatalf("an update with tokenbucket twice: %d %v, want 400 naming tokenbucket", code, m)
	}
	if p, ok := f.reg.Policy("login"); !ok || p.Version != 1 || p.Config.(interface{ Capacity() int64 }).Capacity() != 10 {
		t.Fatalf("after the refused update: %+v", p)
	}
	if code, m := f.do("POST", "/policies", writeToken, strings.Replace(twice, `"login"`, `"signup"`, 1)); code != 400 {
		t.Fatalf("a create with tokenbucket twice: %d %v, want 400", code, m)
	}
}

// goSyntax is what the refusals must not say: Go's names and notation,
// which a person writing JSON on a page cannot type.
var goSyntax = regexp.MustCompile(`rate\.Inf|2\^53|\[-?\d+, |\(0, |\d+h0m|\d+m0s|ratelimit: invalid config|\b(Rate|Burst|PerPeriod|Period|Limit|Window|Segments|Queue|OldestFirst|NewestFirst)\b|jsonPolicy|jsonConfig|int64|float64|time\.Duration`)

// Every refusal speaks the JSON form's words; a wrong type names the value
// given, its JSON type and the type wanted.
func TestRefusalsInJSONWords(t *testing.T) {
	more := []struct{ name, body, field string }{
		{"rate too small", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":1e-300,"burst":1},"key":"ip","apps":["web"]}`, "tokenbucket.rate"},
		{"period too long", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"period":"1000000h","per_period":1,"burst":1},"key":"ip","apps":["web"]}`, "tokenbucket.period"},
		{"no per_period", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"period":"1m","burst":1},"key":"ip","apps":["web"]}`, "tokenbucket.per_period"},
		{"window unsplit", `{"name":"a","algorithm":"slidingwindow","slidingwindow":{"limit":3,"window":"1m","segments":7},"key":"ip","apps":["web"]}`, "slidingwindow.window"},
		{"too many segments", `{"name":"a","algorithm":"slidingwindow","slidingwindow":{"limit":3,"window":"1m","segments":100000},"key":"ip","apps":["web"]}`, "slidingwindow.segments"},
		{"app a number", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web",3]}`, "apps[1]"},
		{"burst true", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":1,"burst":true},"key":"ip","apps":["web"]}`, "tokenbucket.burst"},
	}
	cases := append(more, badPolicies...)
	for _, c := range cases {
		_, err := Decode(strings.NewReader(c.body))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		var fe *FieldError
		if c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field) {
			t.Errorf("%s: %v, want field %s", c.name, err, c.field)
		}
		if s := goSyntax.FindString(err.Error()); s != "" {
			t.Errorf("%s: %q says %q", c.name, err, s)
		}
	}

	for _, c := range []struct{ from, to, field, value, reason string }{
		{`"rate":5`, `"rate":"NaN"`, "tokenbucket.rate", `"NaN"`, "must be a number, not a string"},
		{`"burst":10`, `"burst":1.5`, "tokenbucket.burst", "1.5", "must be a whole number"},
		{`"burst":10`, `"burst":[10]`, "tokenbucket.burst", "[...]", "must be an integer, not a JSON array"},
		{`"rate":5`, `"rate":0`, "tokenbucket.rate", "0", "must be above 0"},
		{`"burst":10`, `"burst":0`, "tokenbucket.burst", "0", "must be an integer from 1 to 9007199254740992"},
		{`["web"]`, `"web"`, "apps", `"web"`, "must be a JSON array of strings, not a string"},
	} {
		_, err := Decode(strings.NewReader(strings.Replace(loginJSON, c.from, c.to, 1)))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || fe.Value != c.value || fe.Reason != c.reason {
			t.Errorf("%s: got %v (%#v), want field %s, value %s: %s", c.to, err, fe, c.field, c.value, c.reason)
		}
	}

	// The admin API gives the same field and value.
	f := newAdmin(t, NewMemoryStore())
	code, m := f.do("POST", "/policies", writeToken, strings.Replace(loginJSON, `"rate":5`, `"rate":"NaN"`, 1))
	if code != 400 || m["field"] != "tokenbucket.rate" || m["value"] != `"NaN"` || !strings.Contains(m["error"].(string), "must be a number, not a string") {
		t.Errorf(`"rate":"NaN": %d %v`, code, m)
	}
}

// Durations are written without the zero units time.Duration's String
// adds, in JSON and in messages.
func TestDurationWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s",
		time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s", 10 * time.Millisecond: "10ms",
		0: "0s", -time.Minute: "-1m", 100 * 365 * 24 * time.Hour: "876000h",
	} {
		if got := fmt.Sprint(Duration(d)); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
		b, _ := json.Marshal(Duration(d))
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != d {
			t.Errorf("%v: %s decodes as %v, %v", d, b, time.Duration(back), err)
		}
	}
	b, _ := json.Marshal(Policy{Name: "w", Config: fixedwindow.Config{Limit: 3, Window: time.Minute}, Key: "ip", Apps: []string{"web"}})
	if !strings.Contains(string(b), `"window":"1m"`) {
		t.Errorf("a window of a minute: %s", b)
	}
}

// The algorithms' messages, rewritten in the JSON form's words.
func TestJSONWords(t *testing.T) {
	for msg, want := range map[string]string{
		"ratelimit: invalid config: tokenbucket: Period must be in (0, 876000h0m0s], got 1h30m0s":                       "must be above 0 and at most 876000h",
		"ratelimit: invalid config: tokenbucket: Rate 0.001 is too small: filling Burst 7 would take more than 1h30m0s": "is too small: filling burst 7 would take more than 1h30m",
		"ratelimit: invalid config: tokenbucket: set Rate or Period, not both (Rate 1, Period 2m0s)":                    "set rate or period, not both (rate 1, period 2m)",
		"ratelimit: invalid config: tokenbucket: Queue.Limit must be in [0, 2^53], got -1":                              "must be an integer from 0 to 9007199254740992",
	} {
		if got := jsonWords("tokenbucket", msg); got != want {
			t.Errorf("%s:\n got %q\nwant %q", msg, got, want)
		}
	}
}
