// Package policy holds named rate-limit policies that a fleet shares and
// changes at run time.
//
// A Policy is a name, an algorithm's configuration (any of the algorithm
// packages' Config values), the key it is counted by ("user", "ip", or
// "global" for one limit shared by every caller) and the applications allowed
// to use it, with who created and last changed it, and when. Policies live in
// a Store: NewRedisStore (shared by every process of a fleet, which learns of
// a change through a pub/sub channel), NewFileStore (a JSON file, for teams
// that keep their configuration in git, reloaded when it changes) or
// NewMemoryStore (one process, tests).
//
// A Registry turns (policy, key, caller) into a decision: it keeps one
// partitioned limiter per policy (memory or Redis backend, see Backend),
// refuses callers outside the policy's applications with ErrForbidden,
// and applies the store's changes to the live limiters: a change of the same
// algorithm reconfigures them in place (ratelimit.Reconfigurer: their state
// carries over by the algorithm's rule), a change of algorithm replaces them
// (their state starts afresh), a deletion closes them.
//
// NewAdmin serves the store and the registry over HTTP as a JSON API:
// list, get, create, update (compare-and-set on the version) and delete
// policies, reset a key and read a key's current figures.
//
// # JSON
//
// A policy is encoded with its algorithm's name and the configuration under
// that name; durations are Go duration strings ("1m30s"):
//
//	{
//	  "name": "login",
//	  "algorithm": "tokenbucket",
//	  "tokenbucket": {"rate": 5, "burst": 10},
//	  "key": "ip",
//	  "apps": ["web", "mobile"],
//	  "version": 3,
//	  "created_by": "alice", "created_at": "2026-01-02T15:04:05Z",
//	  "updated_by": "bob", "updated_at": "2026-01-03T09:00:00Z"
//	}
//
// The configurations are:
//
//	"tokenbucket":   {"rate": 5, "burst": 10} or {"period": "1s", "per_period": 5, "burst": 10}
//	"fixedwindow":   {"limit": 100, "window": "1m"}
//	"slidingwindow": {"limit": 100, "window": "1m", "segments": 6} (segments 0 or absent: weighted)
//	"slidinglog":    {"limit": 100, "window": "1m"}
//	"concurrency":   {"limit": 10}
//
// and each takes "queue": {"limit": 0, "order": "oldest_first" | "newest_first"}.
// Decoding refuses unknown fields, a key given twice in an object, a
// configuration under another algorithm's name, numbers that do not fit,
// and every value the algorithm's Validate refuses; the error is a
// *FieldError naming the field and the value, in the words of this JSON
// form (a value of the wrong type is named with its JSON type and the type
// wanted).
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/strictjson"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
	"golang.org/x/time/rate"
)

// Errors of this package; test them with errors.Is.
var (
	// ErrInvalidPolicy wraps every validation error (a *FieldError); one
	// that comes from the algorithm's Validate wraps
	// ratelimit.ErrInvalidConfig too.
	ErrInvalidPolicy = errors.New("policy: invalid policy")
	// ErrUnknownPolicy: no policy of that name.
	ErrUnknownPolicy = errors.New("policy: unknown policy")
	// ErrForbidden: the calling application is not in the policy's Apps.
	ErrForbidden = errors.New("policy: application not allowed by the policy")
	// ErrExists: Create of a name that is taken.
	ErrExists = errors.New("policy: policy already exists")
	// ErrConflict: Update or Delete of a version that is not the stored
	// one (someone else changed the policy since it was read).
	ErrConflict = errors.New("policy: version conflict")
	// ErrReadOnly: a write to a store that is read-only (a FileStore).
	ErrReadOnly = errors.New("policy: store is read-only")
	// ErrInvalidKey: an empty key for a policy that is not global, or one
	// longer than MaxKeyLen.
	ErrInvalidKey = errors.New("policy: invalid key")
)

// UndecodableError is Store.List's error when some stored policies cannot
// be decoded (written by a newer version of this package, say, or by hand):
// List returns the others with it, and a Registry keeps applying what it
// applied of these before; Get's for one of them. Its Error names them and
// says why. Replace such a policy (Update at its version) or delete it.
type UndecodableError struct {
	Names []string // sorted
	Err   error    // the decoding errors, joined
}

func (e *UndecodableError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("policy: stored policies %q do not decode", e.Names)
	}
	return e.Err.Error()
}
func (e *UndecodableError) Unwrap() error { return e.Err }

// Global is the Key of a policy that is one limit for every caller: the
// registry ignores the key given with each call.
const Global = "global"

// Bounds on a policy's strings.
const (
	MaxNameLen  = 128  // Name: letters, digits, '.', '_', '-'; not . or ..
	MaxKeyLen   = 1024 // a key passed to the registry, in bytes
	MaxApps     = 256  // entries in Apps
	MaxActorLen = 128  // CreatedBy, UpdatedBy
)

// AnyApp in Apps allows every application.
const AnyApp = "*"

// Algorithm names, as in JSON.
const (
	TokenBucket   = "tokenbucket"
	FixedWindow   = "fixedwindow"
	SlidingWindow = "slidingwindow"
	SlidingLog    = "slidinglog"
	Concurrency   = "concurrency"
)

// Policy is a named limit. The zero value is not valid: Name, Config, Key
// and Apps are required.
type Policy struct {
	// Name identifies the policy: 1 to MaxNameLen letters, digits, '.', '_'
	// or '-', and not . or .. (it appears in URLs and Redis keys).
	Name string
	// Config is the algorithm's configuration: a tokenbucket.Config,
	// fixedwindow.Config, slidingwindow.Config, slidinglog.Config or
	// concurrency.Config (values, not pointers).
	Config ratelimit.Config
	// Key says what the limit is counted by: Global for one limit shared by
	// every caller, or the name of the key the caller passes ("user", "ip",
	// "tenant": same syntax as Name), one limit per key.
	Key string
	// Apps lists the applications allowed to use the policy; AnyApp
	// allows every one. Required: an empty list is invalid rather than
	// silently open to all.
	Apps []string
	// Version counts the policy's changes in its store; stores set it.
	Version int64
	// Audit, set by stores.
	CreatedBy string
	CreatedAt time.Time
	UpdatedBy string
	UpdatedAt time.Time
}

// Algorithm returns the name of p's algorithm ("tokenbucket", ...), or ""
// when Config is not one of the algorithm packages' configs (as a value).
func (p Policy) Algorithm() string {
	if reflect.ValueOf(p.Config).Kind() == reflect.Pointer { // policies hold configs as values
		return ""
	}
	return algo.Name(p.Config)
}

// Allows reports whether app may use the policy.
func (p Policy) Allows(app string) bool {
	for _, a := range p.Apps {
		if a == app || a == AnyApp {
			return true
		}
	}
	return false
}

// FieldError is a validation error: the JSON field (a dotted path such as
// "tokenbucket.burst") and the value refused. It wraps ErrInvalidPolicy, and
// ratelimit.ErrInvalidConfig when the algorithm's Validate refused it.
type FieldError struct {
	Field  string
	Value  string
	Reason string
	err    error
}

func (e *FieldError) Error() string {
	if e.Value == "" { // a key, not a value (an unknown field)
		return fmt.Sprintf("policy: invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("policy: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrInvalidPolicy and the cause, if any.
func (e *FieldError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrInvalidPolicy, e.err}
	}
	return []error{ErrInvalidPolicy}
}

func fieldErr(field string, value any, reason string) *FieldError {
	return &FieldError{Field: field, Value: quoteValue(value), Reason: reason}
}

func quoteValue(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func checkName(field, s string) error {
	if s == "" || len(s) > MaxNameLen || !nameRE.MatchString(s) || s == "." || s == ".." {
		// "." and ".." would be path segments, not names, in a URL.
		return fieldErr(field, s, fmt.Sprintf("must be 1 to %d letters, digits, '.', '_' or '-', and not . or ..", MaxNameLen))
	}
	return nil
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return fieldErr(field, s, fmt.Sprintf("must be at most %d bytes", max))
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fieldErr(field, s, "must be printable UTF-8")
		}
	}
	return nil
}

// Validate reports the first invalid field of p as a *FieldError. The
// configuration is checked by its algorithm's Validate, and more: a token
// bucket's rate must be finite (rate.Inf is for code, not for a shared
// policy), windows and periods whole microseconds, and so a sliding
// window's segments (the Redis backend's resolution).
func (p Policy) Validate() error {
	if err := checkName("name", p.Name); err != nil {
		return err
	}
	if p.Config == nil {
		return fieldErr("algorithm", "", "is required")
	}
	alg := p.Algorithm()
	if alg == "" {
		return fieldErr("algorithm", fmt.Sprintf("%T", p.Config), "is not an algorithm of limitkit")
	}
	if err := validateConfig(alg, p.Config); err != nil {
		return err
	}
	if err := checkName("key", p.Key); err != nil {
		return err
	}
	if len(p.Apps) == 0 {
		return fieldErr("apps", "[]", `must list the allowed applications, or "*" for any`)
	}
	if len(p.Apps) > MaxApps {
		return fieldErr("apps", len(p.Apps), fmt.Sprintf("must have at most %d entries", MaxApps))
	}
	for i, a := range p.Apps {
		if a == AnyApp {
			continue
		}
		if err := checkName(fmt.Sprintf("apps[%d]", i), a); err != nil {
			return err
		}
	}
	if p.Version < 0 {
		return fieldErr("version", p.Version, "must not be negative")
	}
	if err := checkText("created_by", p.CreatedBy, MaxActorLen); err != nil {
		return err
	}
	return checkText("updated_by", p.UpdatedBy, MaxActorLen)
}

// goFields maps the Go field names that Validate errors name to their JSON
// names.
var goFields = []struct{ goName, json string }{
	{"Queue.Limit", "queue.limit"}, {"Queue.Order", "queue.order"},
	{"PerPeriod", "per_period"}, {"Period", "period"}, {"Burst", "burst"}, {"Rate", "rate"},
	{"Segments", "segments"}, {"Window", "window"}, {"Limit", "limit"},
}

func validateConfig(alg string, cfg ratelimit.Config) error {
	c := toJSONConfig(cfg)
	// Checks the algorithms leave to the backends or allow in code.
	if tb, ok := cfg.(tokenbucket.Config); ok {
		r := float64(tb.Rate)
		if math.IsNaN(r) || math.IsInf(r, 0) || tb.Rate == rate.Inf {
			return fieldErr(alg+".rate", r, "must be a finite number")
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"window", time.Duration(c.Window)}, {"period", time.Duration(c.Period)}} {
		if d.v%time.Microsecond != 0 {
			return fieldErr(alg+"."+d.name, Duration(d.v).String(), "must be a whole number of microseconds")
		}
	}
	err := cfg.Validate()
	if err == nil {
		if sw, ok := cfg.(slidingwindow.Config); ok && sw.Segments > 0 && (sw.Window/time.Microsecond)%time.Duration(sw.Segments) != 0 {
			return fieldErr(alg+".segments", sw.Segments, fmt.Sprintf("must split the window (%v) into segments of whole microseconds", Duration(sw.Window)))
		}
		return nil
	}
	// Name the field the algorithm's error names, in JSON, with its value.
	msg := err.Error()
	field, value := alg, any("")
	best := len(msg)
	for _, f := range goFields {
		if i := strings.Index(msg, f.goName); i >= 0 && i < best {
			best, field = i, alg+"."+f.json
			value = c.value(f.json)
		}
	}
	fe := fieldErr(field, value, jsonWords(alg, msg))
	fe.err = err
	return fe
}

// goWords rewrites what the algorithms' Validate errors say in Go's
// words (field names, rate.Inf, interval notation, 2^53, durations such as
// "1m0s") in the words of the JSON form, which is what the admin API and
// the pages show.
var goWords = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`must be > 0 \(or rate\.Inf\)`), "must be above 0"},
	{regexp.MustCompile(`must be in \[(-?\d+), 2\^53\]`), "must be an integer from $1 to " + strconv.FormatInt(1<<53, 10)},
	{regexp.MustCompile(`must be in \[(-?\d+), (\d+)\]`), "must be an integer from $1 to $2"},
	{regexp.MustCompile(`must be in \(0, ([^\]]+)\]`), "must be above 0 and at most $1"},
	{regexp.MustCompile(`must split into Segments (\d+) of whole nanoseconds`), "must split into $1 segments of whole microseconds"},
	{regexp.MustCompile(`, got [^,]*$`), ""},
}

// goDurationRE matches the durations time.Duration's String writes with
// minutes ("1m0s", "1h30m0s"), which Duration's String writes shorter.
var goDurationRE = regexp.MustCompile(`\b\d+h\d+m[\d.]+s\b|\b\d+m[\d.]+s\b`)

var goFieldRE = regexp.MustCompile(`\b(Queue\.Limit|Queue\.Order|PerPeriod|Period|Burst|Rate|Segments|Window|Limit)\b`)

// jsonWords is the reason of alg's Validate error msg in the JSON form's
// words, without the packages' prefixes and the field the error is about,
// which a FieldError names.
func jsonWords(alg, msg string) string {
	if _, after, ok := strings.Cut(msg, alg+": "); ok {
		msg = after
	}
	for _, w := range goWords {
		msg = w.re.ReplaceAllString(msg, w.with)
	}
	msg = goDurationRE.ReplaceAllStringFunc(msg, func(s string) string {
		if d, err := time.ParseDuration(s); err == nil {
			return Duration(d).String()
		}
		return s
	})
	msg = goFieldRE.ReplaceAllStringFunc(msg, func(goName string) string {
		for _, f := range goFields {
			if f.goName == goName {
				return f.json
			}
		}
		return goName
	})
	// "rate must be ..." and "window 1m must ..." under the field's name:
	// the reason alone.
	for _, f := range goFields {
		if rest, ok := strings.CutPrefix(msg, f.json+" "); ok {
			if i := strings.IndexByte(rest, ' '); i > 0 && !strings.HasPrefix(rest, "must ") && !strings.HasPrefix(rest, "is ") {
				rest = rest[i+1:] // its value
			}
			msg = rest
			break
		}
	}
	return msg
}

// Duration is a time.Duration encoded in JSON as a Go duration string
// ("1m30s"), without the zero units that time.Duration's String adds after
// the largest ("1m", not "1m0s"; "1h", not "1h0m0s").
type Duration time.Duration

// String is d as MarshalJSON writes it, unquoted: "1m", "1m30s", "1.5s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
		if t, ok := strings.CutSuffix(s, "h0m"); ok {
			s = t + "h"
		}
	}
	return s
}

// MarshalJSON encodes d as a duration string (see String).
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// UnmarshalJSON decodes a duration string; a number or a malformed string
// is a *json.UnmarshalTypeError whose Value is the literal given.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: durationType}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// jsonQueue is ratelimit.Queue in JSON.
type jsonQueue struct {
	Limit int    `json:"limit,omitempty"`
	Order string `json:"order,omitempty"` // "oldest_first" (default) or "newest_first"
}

// jsonConfig is the union of the algorithms' fields; each algorithm
// accepts only its own (see allowed).
type jsonConfig struct {
	Rate      *float64   `json:"rate,omitempty"`
	Burst     int        `json:"burst,omitempty"`
	Period    Duration   `json:"period,omitempty"`
	PerPeriod int        `json:"per_period,omitempty"`
	Limit     int        `json:"limit,omitempty"`
	Window    Duration   `json:"window,omitempty"`
	Segments  int        `json:"segments,omitempty"`
	Queue     *jsonQueue `json:"queue,omitempty"`
}

func (c jsonConfig) value(field string) any {
	switch field {
	case "rate":
		if c.Rate == nil {
			return 0.0
		}
		return *c.Rate
	case "burst":
		return c.Burst
	case "period":
		return c.Period.String()
	case "per_period":
		return c.PerPeriod
	case "limit":
		return c.Limit
	case "window":
		return c.Window.String()
	case "segments":
		return c.Segments
	case "queue.limit":
		if c.Queue != nil {
			return c.Queue.Limit
		}
	case "queue.order":
		if c.Queue != nil {
			return c.Queue.Order
		}
	}
	return ""
}

// allowed lists the fields of each algorithm's JSON config.
var allowed = map[string][]string{
	TokenBucket:   {"rate", "burst", "period", "per_period", "queue"},
	FixedWindow:   {"limit", "window", "queue"},
	SlidingWindow: {"limit", "window", "segments", "queue"},
	SlidingLog:    {"limit", "window", "queue"},
	Concurrency:   {"limit", "queue"},
}

func queueJSON(q ratelimit.Queue) *jsonQueue {
	if q == (ratelimit.Queue{}) {
		return nil
	}
	j := &jsonQueue{Limit: q.Limit}
	switch q.Order {
	case ratelimit.OldestFirst:
	case ratelimit.NewestFirst:
		j.Order = "newest_first"
	default:
		j.Order = q.Order.String()
	}
	return j
}

func toJSONConfig(cfg ratelimit.Config) jsonConfig {
	var c jsonConfig
	switch v := cfg.(type) {
	case tokenbucket.Config:
		if v.Rate != 0 {
			r := float64(v.Rate)
			c.Rate = &r
		}
		c.Burst, c.Period, c.PerPeriod, c.Queue = v.Burst, Duration(v.Period), v.PerPeriod, queueJSON(v.Queue)
	case fixedwindow.Config:
		c.Limit, c.Window, c.Queue = v.Limit, Duration(v.Window), queueJSON(v.Queue)
	case slidingwindow.Config:
		c.Limit, c.Window, c.Segments, c.Queue = v.Limit, Duration(v.Window), v.Segments, queueJSON(v.Queue)
	case slidinglog.Config:
		c.Limit, c.Window, c.Queue = v.Limit, Duration(v.Window), queueJSON(v.Queue)
	case concurrency.Config:
		c.Limit, c.Queue = v.Limit, queueJSON(v.Queue)
	}
	return c
}

func fromJSONConfig(alg string, c jsonConfig) (ratelimit.Config, error) {
	var q ratelimit.Queue
	if c.Queue != nil {
		q.Limit = c.Queue.Limit
		switch c.Queue.Order {
		case "", "oldest_first":
		case "newest_first":
			q.Order = ratelimit.NewestFirst
		default:
			return nil, fieldErr(alg+".queue.order", c.Queue.Order, `must be "oldest_first" or "newest_first"`)
		}
	}
	switch alg {
	case TokenBucket:
		cfg := tokenbucket.Config{Burst: c.Burst, Period: time.Duration(c.Period), PerPeriod: c.PerPeriod, Queue: q}
		if c.Rate != nil {
			cfg.Rate = rate.Limit(*c.Rate)
		}
		return cfg, nil
	case FixedWindow:
		return fixedwindow.Config{Limit: c.Limit, Window: time.Duration(c.Window), Queue: q}, nil
	case SlidingWindow:
		return slidingwindow.Config{Limit: c.Limit, Window: time.Duration(c.Window), Segments: c.Segments, Queue: q}, nil
	case SlidingLog:
		return slidinglog.Config{Limit: c.Limit, Window: time.Duration(c.Window), Queue: q}, nil
	case Concurrency:
		return concurrency.Config{Limit: c.Limit, Queue: q}, nil
	}
	return nil, fieldErr("algorithm", alg, "must be one of tokenbucket, fixedwindow, slidingwindow, slidinglog, concurrency")
}

// jsonPolicy is a Policy in JSON; exactly one of the algorithm fields is
// set, the one Algorithm names.
type jsonPolicy struct {
	Name          string          `json:"name"`
	Algorithm     string          `json:"algorithm"`
	TokenBucket   json.RawMessage `json:"tokenbucket,omitempty"`
	FixedWindow   json.RawMessage `json:"fixedwindow,omitempty"`
	SlidingWindow json.RawMessage `json:"slidingwindow,omitempty"`
	SlidingLog    json.RawMessage `json:"slidinglog,omitempty"`
	Concurrency   json.RawMessage `json:"concurrency,omitempty"`
	Key           string          `json:"key"`
	Apps          []string        `json:"apps"`
	Version       int64           `json:"version,omitempty"`
	CreatedBy     string          `json:"created_by,omitempty"`
	CreatedAt     *time.Time      `json:"created_at,omitempty"`
	UpdatedBy     string          `json:"updated_by,omitempty"`
	UpdatedAt     *time.Time      `json:"updated_at,omitempty"`
}

func (j *jsonPolicy) slot(alg string) *json.RawMessage {
	switch alg {
	case TokenBucket:
		return &j.TokenBucket
	case FixedWindow:
		return &j.FixedWindow
	case SlidingWindow:
		return &j.SlidingWindow
	case SlidingLog:
		return &j.SlidingLog
	case Concurrency:
		return &j.Concurrency
	}
	return nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// MarshalJSON encodes p in the package's JSON form. A Config that is not
// one of the algorithm packages' is an error.
func (p Policy) MarshalJSON() ([]byte, error) {
	alg := p.Algorithm()
	if alg == "" {
		return nil, fieldErr("algorithm", fmt.Sprintf("%T", p.Config), "is not an algorithm of limitkit")
	}
	apps := p.Apps
	if apps == nil {
		apps = []string{}
	}
	j := jsonPolicy{
		Name: p.Name, Algorithm: alg, Key: p.Key, Apps: apps, Version: p.Version,
		CreatedBy: p.CreatedBy, CreatedAt: timePtr(p.CreatedAt),
		UpdatedBy: p.UpdatedBy, UpdatedAt: timePtr(p.UpdatedAt),
	}
	c, err := json.Marshal(toJSONConfig(p.Config))
	if err != nil {
		return nil, err
	}
	*j.slot(alg) = c
	return json.Marshal(j)
}

// UnmarshalJSON decodes p from the package's JSON form, refusing unknown
// fields, and validates it (see Validate and Decode).
func (p *Policy) UnmarshalJSON(b []byte) error {
	q, err := Decode(bytes.NewReader(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Decode reads one policy in JSON from r and validates it. Unknown fields,
// a key given twice, a configuration under another algorithm's name,
// trailing data, numbers that do not fit their field and values the
// algorithm refuses are errors; a field's error is a *FieldError. Malformed
// JSON and trailing data are errors wrapping ErrInvalidPolicy; an error of
// r (an *http.MaxBytesError) is returned as r gave it.
func Decode(r io.Reader) (Policy, error) {
	var j jsonPolicy
	if err := decodeStrict(r, &j); err != nil {
		return Policy{}, err
	}
	return fromJSON(j)
}

// requestPolicy is a policy as a request to the admin API carries it: its
// audit fields, which the store sets, are taken as any JSON and dropped
// (they are the outer fields of their names, so they shadow jsonPolicy's).
type requestPolicy struct {
	jsonPolicy
	CreatedBy json.RawMessage `json:"created_by"`
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedBy json.RawMessage `json:"updated_by"`
	UpdatedAt json.RawMessage `json:"updated_at"`
}

// decodeRequest is Decode for the body of a request: its audit fields
// are ignored, whatever they hold.
func decodeRequest(r io.Reader) (Policy, error) {
	var j requestPolicy
	if err := decodeStrict(r, &j); err != nil {
		return Policy{}, err
	}
	return fromJSON(j.jsonPolicy)
}

// decodeStrict decodes into v the one JSON object r holds, refusing
// malformed JSON, trailing data, duplicate keys and unknown fields. An
// error of r (a body over its bound) is returned as it is.
func decodeStrict(r io.Reader, v any) error {
	raw, err := strictjson.Read(r)
	if err != nil {
		return decodeErr(err, "", "a policy")
	}
	if raw[0] != '{' { // null, which would decode as an empty policy, or not an object
		return fmt.Errorf("%w: a policy is a JSON object, got %.20s", ErrInvalidPolicy, raw)
	}
	return decodeErr(strictjson.Unmarshal(raw, v), "", "a policy")
}

// decodeErr is err, strictjson's, as this package's: a *FieldError naming
// the field under prefix (the algorithm, for a configuration; an unknown
// field is "not a field of" what), or for the document, malformed JSON or
// trailing data, an error wrapping ErrInvalidPolicy. An error that is not
// about the JSON (a read error) is returned as it is.
func decodeErr(err error, prefix, what string) error {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return err
	}
	var te *json.UnmarshalTypeError
	isType := errors.As(err, &te)
	field := se.Field
	switch {
	case field == "" && !isType:
		return fmt.Errorf("%w: %w", ErrInvalidPolicy, se)
	case field == "" && prefix == "":
		field = "(document)"
	case field == "":
		field = prefix
	case prefix != "":
		field = prefix + "." + field
	}
	reason := se.Reason
	if reason == "is not a known field" {
		reason = "is not a field of " + what
	}
	return &FieldError{Field: field, Value: se.Value, Reason: reason, err: se}
}

func fromJSON(j jsonPolicy) (Policy, error) {
	p := Policy{
		Name: j.Name, Key: j.Key, Apps: j.Apps, Version: j.Version,
		CreatedBy: j.CreatedBy, UpdatedBy: j.UpdatedBy,
	}
	if j.CreatedAt != nil {
		p.CreatedAt = *j.CreatedAt
	}
	if j.UpdatedAt != nil {
		p.UpdatedAt = *j.UpdatedAt
	}
	if err := checkName("name", p.Name); err != nil {
		return Policy{}, err
	}
	if j.Algorithm == "" {
		return Policy{}, fieldErr("algorithm", "", "is required")
	}
	slot := j.slot(j.Algorithm)
	if slot == nil {
		return Policy{}, fieldErr("algorithm", j.Algorithm, "must be one of tokenbucket, fixedwindow, slidingwindow, slidinglog, concurrency")
	}
	for _, other := range []string{TokenBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency} {
		if other != j.Algorithm && *j.slot(other) != nil {
			return Policy{}, fieldErr(other, "{...}", "is not the policy's algorithm "+strconv.Quote(j.Algorithm))
		}
	}
	if *slot == nil {
		return Policy{}, fieldErr(j.Algorithm, "", "is required: the algorithm's configuration")
	}
	var c jsonConfig
	if err := strictjson.Unmarshal(*slot, &c); err != nil {
		return Policy{}, decodeErr(err, j.Algorithm, j.Algorithm)
	}
	set := c.setFields()
	for _, f := range set {
		ok := false
		for _, a := range allowed[j.Algorithm] {
			ok = ok || a == f
		}
		if !ok {
			return Policy{}, fieldErr(j.Algorithm+"."+f, c.value(f), "is not a field of "+j.Algorithm)
		}
	}
	cfg, err := fromJSONConfig(j.Algorithm, c)
	if err != nil {
		return Policy{}, err
	}
	p.Config = cfg
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func (c jsonConfig) setFields() []string {
	var s []string
	if c.Rate != nil {
		s = append(s, "rate")
	}
	if c.Burst != 0 {
		s = append(s, "burst")
	}
	if c.Period != 0 {
		s = append(s, "period")
	}
	if c.PerPeriod != 0 {
		s = append(s, "per_period")
	}
	if c.Limit != 0 {
		s = append(s, "limit")
	}
	if c.Window != 0 {
		s = append(s, "window")
	}
	if c.Segments != 0 {
		s = append(s, "segments")
	}
	if c.Queue != nil {
		s = append(s, "queue")
	}
	return s
}
