package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJSONRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, p := range []Policy{
		{Name: "login", Config: tokenbucket.Config{Rate: 5, Burst: 10}, Key: "ip", Apps: []string{"web", "mobile"},
			Version: 3, CreatedBy: "alice", CreatedAt: at, UpdatedBy: "bob", UpdatedAt: at.Add(time.Hour)},
		{Name: "tb-interval", Config: tokenbucket.Config{Period: time.Second, PerPeriod: 5, Burst: 10, Queue: ratelimit.Queue{Limit: 3, Order: ratelimit.NewestFirst}}, Key: Global, Apps: []string{AnyApp}},
		{Name: "fw", Config: fixedwindow.Config{Limit: 100, Window: time.Minute}, Key: "user", Apps: []string{"api"}},
		{Name: "sw", Config: slidingwindow.Config{Limit: 100, Window: time.Minute, Segments: 6}, Key: "user", Apps: []string{"api"}},
		{Name: "sww", Config: slidingwindow.Config{Limit: 100, Window: time.Minute}, Key: "user", Apps: []string{"api"}},
		{Name: "sl", Config: slidinglog.Config{Limit: 7, Window: 90 * time.Second}, Key: "tenant", Apps: []string{"api"}},
		{Name: "cc", Config: concurrency.Config{Limit: 10, Queue: ratelimit.Queue{Limit: 4}}, Key: Global, Apps: []string{"api"}},
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		var q Policy
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatalf("%s: %s: %v", p.Name, b, err)
		}
		b2, _ := json.Marshal(q)
		if string(b) != string(b2) || q.Config != p.Config || !q.CreatedAt.Equal(p.CreatedAt) {
			t.Errorf("%s: round trip\n%s\n%s", p.Name, b, b2)
		}
	}
	b, _ := json.Marshal(Policy{Name: "login", Config: tokenbucket.Config{Rate: 5, Burst: 10}, Key: "ip", Apps: []string{"web"}})
	if want := `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"key":"ip","apps":["web"]}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	b, _ = json.Marshal(Policy{Name: "w", Config: fixedwindow.Config{Limit: 3, Window: 90 * time.Second}, Key: "ip", Apps: []string{"web"}})
	if want := `{"name":"w","algorithm":"fixedwindow","fixedwindow":{"limit":3,"window":"1m30s"},"key":"ip","apps":["web"]}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

// badPolicies are invalid policy documents, each with the field its error
// must name ("" for malformed JSON).
var badPolicies = []struct {
	name, body, field string
}{
	{"empty", ``, ""},
	{"not json", `{"name":`, ""},
	{"NaN literal", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":NaN,"burst":1},"key":"ip","apps":["web"]}`, ""},
	{"NaN string", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":"NaN","burst":1},"key":"ip","apps":["web"]}`, "tokenbucket.rate"},
	{"Inf by overflow", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":1e999,"burst":1},"key":"ip","apps":["web"]}`, "tokenbucket.rate"},
	{"negative rate", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":-1,"burst":1},"key":"ip","apps":["web"]}`, "tokenbucket.rate"},
	{"zero burst", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":1},"key":"ip","apps":["web"]}`, "tokenbucket.burst"},
	{"rate and period", `{"name":"a","algorithm":"tokenbucket","tokenbucket":{"rate":1,"burst":1,"period":"1s","per_period":1},"key":"ip","apps":["web"]}`, "tokenbucket.rate"},
	{"int overflow", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":1e30,"window":"1s"},"key":"ip","apps":["web"]}`, "fixedwindow.limit"},
	{"limit over 2^53", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":9007199254740993,"window":"1s"},"key":"ip","apps":["web"]}`, "fixedwindow.limit"},
	{"fraction", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":1.5,"window":"1s"},"key":"ip","apps":["web"]}`, "fixedwindow.limit"},
	{"negative limit", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":-3,"window":"1s"},"key":"ip","apps":["web"]}`, "fixedwindow.limit"},
	{"window as number", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":3,"window":1000},"key":"ip","apps":["web"]}`, "fixedwindow.window"},
	{"bad window", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":3,"window":"soon"},"key":"ip","apps":["web"]}`, "fixedwindow.window"},
	{"negative window", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":3,"window":"-1s"},"key":"ip","apps":["web"]}`, "fixedwindow.window"},
	{"nanosecond window", `{"name":"a","algorithm":"slidinglog","slidinglog":{"limit":3,"window":"1500ns"},"key":"ip","apps":["web"]}`, "slidinglog.window"},
	{"missing window", `{"name":"a","algorithm":"slidinglog","slidinglog":{"limit":3},"key":"ip","apps":["web"]}`, "slidinglog.window"},
	{"segments", `{"name":"a","algorithm":"slidingwindow","slidingwindow":{"limit":3,"window":"1s","segments":-1},"key":"ip","apps":["web"]}`, "slidingwindow.segments"},
	{"segments of nanoseconds", `{"name":"a","algorithm":"slidingwindow","slidingwindow":{"limit":3,"window":"1ms","segments":64},"key":"ip","apps":["web"]}`, "slidingwindow.segments"},
	{"queue order", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":3,"queue":{"order":"random"}},"key":"ip","apps":["web"]}`, "concurrency.queue.order"},
	{"queue limit", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":3,"queue":{"limit":-1}},"key":"ip","apps":["web"]}`, "concurrency.queue.limit"},
	{"unknown algorithm", `{"name":"a","algorithm":"leakybucket","key":"ip","apps":["web"]}`, "algorithm"},
	{"no algorithm", `{"name":"a","key":"ip","apps":["web"]}`, "algorithm"},
	{"config missing", `{"name":"a","algorithm":"concurrency","key":"ip","apps":["web"]}`, "concurrency"},
	{"config of another", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"fixedwindow":{"limit":1,"window":"1s"},"key":"ip","apps":["web"]}`, "fixedwindow"},
	{"field of another", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1,"window":"1s"},"key":"ip","apps":["web"]}`, "concurrency.window"},
	{"unknown field", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"],"owner":"x"}`, "owner"},
	{"unknown nested", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1,"max":2},"key":"ip","apps":["web"]}`, "concurrency.max"},
	{"no name", `{"algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]}`, "name"},
	{"bad name", `{"name":"a/b","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]}`, "name"},
	{"name dot", `{"name":".","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]}`, "name"},
	{"name dot dot", `{"name":"..","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]}`, "name"},
	{"apps a string", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":"web"}`, "apps"},
	{"config an array", `{"name":"a","algorithm":"concurrency","concurrency":[1],"key":"ip","apps":["web"]}`, "concurrency"},
	{"queue a number", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1,"queue":5},"key":"ip","apps":["web"]}`, "concurrency.queue"},
	{"no key", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"apps":["web"]}`, "key"},
	{"no apps", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip"}`, "apps"},
	{"empty apps", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":[]}`, "apps"},
	{"bad app", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["w b"]}`, "apps[0]"},
	{"negative version", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"],"version":-2}`, "version"},
	{"string version", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"],"version":"2"}`, "version"},
	{"trailing", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]} {}`, ""},
	{"trailing brace", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]}}`, ""},
	{"trailing bracket", `{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]} ]`, ""},
	{"array", `[]`, ""},
	{"null", `null`, ""},
	{"number", `3`, ""},
}

func TestDecodeRefuses(t *testing.T) {
	for _, c := range badPolicies {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(c.body))
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("got %v, want ErrInvalidPolicy", err)
			}
			var fe *FieldError
			if c.field == "" {
				if errors.As(err, &fe) {
					t.Fatalf("got field error %v, want malformed JSON", err)
				}
				return
			}
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v (%#v), want field %q", err, fe, c.field)
			}
			if !strings.Contains(err.Error(), fe.Field) {
				t.Errorf("%v does not name %s", err, fe.Field)
			}
		})
	}
}

func TestFieldErrorNamesValue(t *testing.T) {
	_, err := Decode(strings.NewReader(`{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":-3,"window":"1s"},"key":"ip","apps":["web"]}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Value != "-3" || !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("got %v %#v", err, fe)
	}
	err = Policy{Name: "a", Config: tokenbucket.Config{Rate: ratelimitInf(), Burst: 1}, Key: "ip", Apps: []string{"x"}}.Validate()
	if !errors.As(err, &fe) || fe.Field != "tokenbucket.rate" {
		t.Fatalf("got %v", err)
	}
	err = Policy{Name: "a", Config: &fixedwindow.Config{Limit: 1, Window: time.Second}, Key: "ip", Apps: []string{"x"}}.Validate()
	if !errors.As(err, &fe) || fe.Field != "algorithm" {
		t.Fatalf("a pointer config: got %v", err)
	}
}

func TestAllows(t *testing.T) {
	p := Policy{Apps: []string{"web", "mobile"}}
	if !p.Allows("web") || !p.Allows("mobile") || p.Allows("batch") || p.Allows("") {
		t.Error("Allows with a list")
	}
	p.Apps = []string{AnyApp}
	if !p.Allows("batch") {
		t.Error("Allows with *")
	}
}

func ratelimitInf() rate.Limit { return rate.Inf }
