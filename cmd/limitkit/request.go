package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/strictjson"
	"github.com/limitkit/ratelimit/policy"
)

// runRequest is the body of POST /demo/run.
type runRequest struct {
	Session string          `json:"session"`
	A       json.RawMessage `json:"a"` // a limiter spec: see parseSpec
	B       json.RawMessage `json:"b"` // optional: a second limiter on the same traffic
	Traffic traffic         `json:"traffic"`
}

// traffic is what a run sends to the limiters.
type traffic struct {
	Mode    string          `json:"mode"`    // "one", "burst", "steady" or "edge"
	N       int             `json:"n"`       // burst: requests; edge: requests on each side of the edge
	Rate    float64         `json:"rate"`    // steady: requests per second
	Seconds float64         `json:"seconds"` // steady: how long
	Hold    policy.Duration `json:"hold"`    // concurrency grants are released after this
}

// fieldError is a 400 naming the field.
type fieldError struct{ field, value, msg string }

func (e *fieldError) Error() string { return e.msg }

func badField(field string, value any, format string, args ...any) *fieldError {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &fieldError{field: field, value: fmt.Sprint(value), msg: msg}
}

func (t *traffic) validate() error {
	switch t.Mode {
	case "one":
		t.N = 1
	case "burst", "edge":
		if t.N < 1 || t.N > maxBurst {
			return badField("traffic.n", t.N, "must be 1 to %d", maxBurst)
		}
	case "steady":
		if !(t.Rate > 0 && t.Rate <= maxSteadyRate) {
			return badField("traffic.rate", t.Rate, "must be above 0 and at most %d per second", maxSteadyRate)
		}
		if !(t.Seconds > 0 && t.Seconds <= maxSteadySeconds) {
			return badField("traffic.seconds", t.Seconds, "must be above 0 and at most %d", maxSteadySeconds)
		}
		if t.Rate*t.Seconds < 1 {
			return badField("traffic.seconds", t.Seconds, "sends no request at %g per second", t.Rate)
		}
	default:
		return badField("traffic.mode", t.Mode, `must be "one", "burst", "steady" or "edge"`)
	}
	if t.Hold < 0 || time.Duration(t.Hold) > maxHold {
		return badField("traffic.hold", t.Hold, "must be 0 to %v", policy.Duration(maxHold))
	}
	if t.Hold == 0 {
		t.Hold = policy.Duration(defaultHold)
	}
	return nil
}

// decodeRun reads and checks a run's body: strictly (a key given twice,
// an unknown field, trailing data are refused), in JSON's words; a body
// over maxDemoBody is an *http.MaxBytesError, white space after the object
// included.
func decodeRun(r *http.Request) (runRequest, error) {
	var req runRequest
	if err := strictjson.Decode(http.MaxBytesReader(nil, r.Body, maxDemoBody), &req); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return req, &fieldError{field: se.Field, value: se.Value, msg: se.Error()}
		}
		return req, err
	}
	if req.Session == "" {
		return req, badField("session", "", "required: create one with POST /demo/sessions")
	}
	if len(bytes.TrimSpace(req.A)) == 0 || string(bytes.TrimSpace(req.A)) == "null" {
		return req, badField("a", "", "required: a limiter")
	}
	return req, req.Traffic.validate()
}

// spec is a parsed limiter spec, not yet made.
type spec struct {
	canonical string
	label     string
	cfg       ratelimit.Config // nil for a stored policy
	policy    string
	key       string
}

// parseSpec reads one limiter spec: either an algorithm and its
// configuration, in the policy package's JSON form,
//
//	{"algorithm": "fixedwindow", "fixedwindow": {"limit": 10, "window": "1s"}}
//
// or a stored policy, used read-only on a key of the demo's own,
//
//	{"policy": "demo", "key": "visitor-1"}
//
// Errors name the field, under name ("a.fixedwindow.limit").
func (d *demo) parseSpec(name string, raw json.RawMessage) (spec, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return spec{}, badField(name, string(raw), "must be an object")
	}
	if _, ok := fields["policy"]; ok {
		var ps struct {
			Policy string `json:"policy"`
			Key    string `json:"key"`
		}
		if err := strictjson.Unmarshal(raw, &ps); err != nil {
			var se *strictjson.Error
			if errors.As(err, &se) && se.Field != "" {
				return spec{}, &fieldError{field: name + "." + se.Field, value: se.Value,
					msg: fmt.Sprintf("%s.%s (a stored policy is {\"policy\": name, \"key\": key})", name, se.Error())}
			}
			return spec{}, badField(name, "", "a stored policy is {\"policy\": name, \"key\": key}: %v", err)
		}
		p, ok := d.reg.Policy(ps.Policy)
		switch {
		case !ok:
			return spec{}, badField(name+".policy", ps.Policy, "no such policy")
		case !p.Allows(demoApp):
			return spec{}, badField(name+".policy", ps.Policy, "the policy does not allow the %q application", demoApp)
		case p.Key == policy.Global:
			return spec{}, badField(name+".policy", ps.Policy, "a global policy is every caller's limit: the demo does not spend it")
		}
		if ps.Key == "" || len(ps.Key) > maxDemoKeyLen || strings.IndexFunc(ps.Key, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '{' || r == '}' }) >= 0 {
			return spec{}, badField(name+".key", ps.Key, "must be 1 to %d printable characters, without spaces or braces", maxDemoKeyLen)
		}
		return spec{
			canonical: "policy\x00" + ps.Policy + "\x00" + ps.Key,
			label:     fmt.Sprintf("policy %s (%s), key %s", ps.Policy, describe(p.Config), demoKey(ps.Key)),
			policy:    ps.Policy,
			key:       ps.Key,
		}, nil
	}

	if _, ok := fields["algorithm"]; !ok {
		return spec{}, badField(name+".algorithm", "", "required (or \"policy\" for a stored policy)")
	}
	// The policy package decodes and validates the configuration, naming
	// the field: the demo adds a name, key and application of its own.
	fields["name"], _ = json.Marshal("demo-" + name)
	fields["key"], _ = json.Marshal("demo")
	fields["apps"], _ = json.Marshal([]string{demoApp})
	doc, _ := json.Marshal(fields)
	p, err := policy.Decode(bytes.NewReader(doc))
	if err != nil {
		var fe *policy.FieldError
		if errors.As(err, &fe) {
			field := name + "." + fe.Field
			if fe.Field == "" || fe.Field == "name" || fe.Field == "key" || fe.Field == "apps" {
				field = name
			}
			msg := name + "." + fe.Field
			if fe.Value != "" {
				msg += " " + fe.Value
			}
			return spec{}, &fieldError{field: field, value: fe.Value, msg: msg + ": " + fe.Reason}
		}
		return spec{}, badField(name, "", "%v", err)
	}
	if err := checkBounds(name, p.Config); err != nil {
		return spec{}, err
	}
	canon, _ := p.MarshalJSON()
	return spec{canonical: string(canon), label: describe(p.Config), cfg: p.Config}, nil
}

// demoKey is the registry key the demo spends for a visitor's key, apart
// from every real caller's.
func demoKey(key string) string { return "demo:" + key }

// maxDemoSegments bounds a sliding window's segments, which the page
// draws.
const maxDemoSegments = 100

// checkBounds refuses configurations bigger than a demo needs: counts over
// maxDemoLimit (segments over maxDemoSegments), rates over maxDemoRate,
// windows and periods over maxDemoWindow.
func checkBounds(name string, cfg ratelimit.Config) error {
	d, err := algo.Of("demo", cfg)
	if err != nil {
		return badField(name+".algorithm", fmt.Sprintf("%T", cfg), "not an algorithm of the demo")
	}
	var errs []error
	for _, v := range d.Values() {
		field := name + "." + d.Name() + "." + v.Name
		switch v.Kind {
		case algo.Rate:
			if r := v.V.(float64); r > maxDemoRate {
				return badField(field, r, "at most %d per second in the demo", maxDemoRate)
			}
		case algo.Count:
			if n := v.V.(int); v.Name == "segments" && n > maxDemoSegments {
				return badField(field, n, "at most %d in the demo", maxDemoSegments)
			} else if v.Name != "segments" && n > maxDemoLimit {
				errs = append(errs, badField(field, n, "at most %d in the demo", maxDemoLimit))
			}
		case algo.Duration:
			if w := v.V.(time.Duration); w > maxDemoWindow {
				errs = append(errs, badField(field, policy.Duration(w), "at most %v in the demo", policy.Duration(maxDemoWindow)))
			}
		}
	}
	return errors.Join(errs...)
}

// windowOf is the window or refill period of cfg (its first duration), and
// whether it is a fixed window.
func windowOf(cfg ratelimit.Config) (time.Duration, bool) {
	d, err := algo.Of("demo", cfg)
	if err != nil {
		return 0, false
	}
	for _, v := range d.Values() {
		if v.Kind == algo.Duration {
			return v.V.(time.Duration), d.Name() == policy.FixedWindow
		}
	}
	return 0, false
}

// describe is a configuration in a few words, durations as the page
// writes them ("1m", not "1m0s").
func describe(cfg ratelimit.Config) string {
	if d, err := algo.Of("demo", cfg); err == nil {
		return d.Describe()
	}
	return fmt.Sprintf("%T", cfg)
}

// configOf is the configuration a spec runs: its own, or its stored
// policy's (nil when there is no such policy).
func (d *demo) configOf(sp spec) ratelimit.Config {
	if sp.cfg != nil {
		return sp.cfg
	}
	if p, ok := d.reg.Policy(sp.policy); ok {
		return p.Config
	}
	return nil
}
