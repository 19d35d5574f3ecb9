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
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/strictjson"
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

// goName is the Go name of the field a configuration parameter's JSON
// name names, as the algorithms' Validate errors write it ("per_period":
// "PerPeriod", "queue.limit": "Queue.Limit").
func goName(jsonName string) string {
	b := []byte(jsonName)
	up := true
	out := b[:0]
	for _, c := range b {
		switch {
		case c == '_':
			up = true
			continue
		case c == '.':
			up = true
		case up && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
			up = false
		default:
			up = false
		}
		out = append(out, c)
	}
	return string(out)
}

// jsonNames are the JSON names of every registered algorithm's parameters,
// longest Go name first (so that "Period" is not found in "PerPeriod").
var jsonNames = func() []string {
	set := map[string]bool{"queue.limit": true, "queue.order": true}
	for _, alg := range algo.Names() {
		fields, _ := algo.Fields(alg)
		for _, f := range fields {
			if f.Kind != algo.Queue {
				set[f.Name] = true
			}
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return names
}()

// validateConfig checks cfg, of algorithm alg, with its Validate, and
// what policies shared by a fleet need beyond it: a rate must be finite
// (rate.Inf is for code, not for a shared policy), durations whole
// microseconds, and what the Redis backend refuses (a sliding window's
// segments of whole microseconds). A refusal is a *FieldError naming the
// JSON field the error is about.
func validateConfig(alg string, cfg ratelimit.Config) error {
	d, err := algo.Of("policy", cfg)
	if err != nil {
		return fieldErr("algorithm", fmt.Sprintf("%T", cfg), "is not an algorithm of limitkit")
	}
	values := map[string]any{}
	for _, v := range d.Values() {
		switch v.Kind {
		case algo.Rate:
			if r := v.V.(float64); math.IsNaN(r) || math.IsInf(r, 0) || r == float64(rate.Inf) {
				return fieldErr(alg+"."+v.Name, r, "must be a finite number")
			}
			values[v.Name] = v.V
		case algo.Duration:
			dur := v.V.(time.Duration)
			if dur%time.Microsecond != 0 {
				return fieldErr(alg+"."+v.Name, Duration(dur).String(), "must be a whole number of microseconds")
			}
			values[v.Name] = Duration(dur).String()
		case algo.Queue:
			q := v.V.(ratelimit.Queue)
			values["queue.limit"], values["queue.order"] = q.Limit, q.Order.String()
		default:
			values[v.Name] = v.V
		}
	}
	err = cfg.Validate()
	if err == nil {
		if _, err = d.Redis(algo.RedisOptions{LeaseTTL: time.Second}); err == nil {
			return nil
		}
	}
	// Name the field the algorithm's error names first, in JSON, with its
	// value.
	msg := err.Error()
	field, value := alg, any("")
	best := len(msg)
	for _, name := range jsonNames {
		if i := strings.Index(msg, goName(name)); i >= 0 && i < best {
			best, field, value = i, alg+"."+name, values[name]
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

// goFieldRE matches the Go names of jsonNames.
var goFieldRE = func() *regexp.Regexp {
	alts := make([]string, len(jsonNames))
	for i, n := range jsonNames {
		alts[i] = regexp.QuoteMeta(goName(n))
	}
	return regexp.MustCompile(`\b(` + strings.Join(alts, "|") + `)\b`)
}()

// jsonWords is the reason of alg's Validate error msg in the JSON form's
// words, without the packages' prefixes and the field the error is about,
// which a FieldError names.
func jsonWords(alg, msg string) string {
	for _, pkg := range []string{alg, "redis"} {
		if _, after, ok := strings.Cut(msg, pkg+": "); ok {
			msg = after
		}
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
	msg = goFieldRE.ReplaceAllStringFunc(msg, func(g string) string {
		for _, n := range jsonNames {
			if goName(n) == g {
				return n
			}
		}
		return g
	})
	// "rate must be ..." and "window 1m must ..." under the field's name:
	// the reason alone.
	for _, n := range jsonNames {
		if rest, ok := strings.CutPrefix(msg, n+" "); ok {
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
func (d Duration) String() string { return algo.Short(time.Duration(d)) }

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

// queueFrom is the ratelimit.Queue of j, the queue of alg's configuration.
func queueFrom(alg string, j jsonQueue) (ratelimit.Queue, error) {
	q := ratelimit.Queue{Limit: j.Limit}
	switch j.Order {
	case "", "oldest_first":
	case "newest_first":
		q.Order = ratelimit.NewestFirst
	default:
		return q, fieldErr(alg+".queue.order", j.Order, `must be "oldest_first" or "newest_first"`)
	}
	return q, nil
}

// configJSON is the JSON object of a configuration: its parameters in
// their algorithm's order, those at their zero value left out.
func configJSON(d algo.Descriptor) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, v := range d.Values() {
		var x any
		switch v.Kind {
		case algo.Duration:
			x = Duration(v.V.(time.Duration))
		case algo.Queue:
			x = queueJSON(v.V.(ratelimit.Queue))
		default:
			x = v.V
		}
		if reflect.ValueOf(x).IsZero() {
			continue
		}
		val, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(v.Name))
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// configFrom decodes raw, the JSON object of a configuration of alg,
// refusing a field of no parameter of alg's.
func configFrom(alg string, raw json.RawMessage) (ratelimit.Config, error) {
	fields, ok := algo.Fields(alg)
	if !ok {
		return nil, fieldErr("algorithm", alg, "must be one of "+strings.Join(algo.Names(), ", "))
	}
	var m map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &m); err != nil {
		return nil, decodeErr(err, alg, alg)
	}
	values := make(map[string]any, len(m))
	for _, f := range fields {
		raw, ok := m[f.Name]
		if !ok {
			continue
		}
		delete(m, f.Name)
		var err error
		switch f.Kind {
		case algo.Count:
			var n int
			err = strictjson.Unmarshal(raw, &n)
			values[f.Name] = n
		case algo.Duration:
			var d Duration
			err = strictjson.Unmarshal(raw, &d)
			values[f.Name] = time.Duration(d)
		case algo.Rate:
			var r float64
			err = strictjson.Unmarshal(raw, &r)
			values[f.Name] = r
		case algo.Queue:
			var j jsonQueue
			if err = strictjson.Unmarshal(raw, &j); err == nil {
				var q ratelimit.Queue
				if q, err = queueFrom(alg, j); err != nil {
					return nil, err
				}
				values[f.Name] = q
			}
		}
		if err != nil {
			return nil, decodeErr(err, alg+"."+f.Name, alg)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(m)) {
		value := string(m[key])
		if value[0] == '{' || value[0] == '[' {
			value = value[:1] + "..." + value[len(value)-1:]
		}
		return nil, &FieldError{Field: alg + "." + key, Value: value, Reason: "is not a field of " + alg}
	}
	cfg, _ := algo.Build(alg, values)
	return cfg, nil
}

// jsonPolicy is a Policy in JSON but for its configuration, which the
// document holds under its algorithm's name ("tokenbucket": {...}),
// after "algorithm".
type jsonPolicy struct {
	Name      string     `json:"name"`
	Algorithm string     `json:"algorithm"`
	Key       string     `json:"key"`
	Apps      []string   `json:"apps"`
	Version   int64      `json:"version,omitempty"`
	CreatedBy string     `json:"created_by,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedBy string     `json:"updated_by,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
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
	d, err := algo.Of("policy", p.Config)
	if err != nil {
		return nil, err
	}
	c, err := configJSON(d)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	// The configuration goes after "algorithm", under its name.
	at := bytes.Index(doc, []byte(`,"key":`))
	out := append(append([]byte{}, doc[:at]...), ',')
	out = append(append(strconv.AppendQuote(out, alg), ':'), c...)
	return append(out, doc[at:]...), nil
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
	configs, err := decodeStrict(r, &j)
	if err != nil {
		return Policy{}, err
	}
	return fromJSON(j, configs)
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
	configs, err := decodeStrict(r, &j)
	if err != nil {
		return Policy{}, err
	}
	return fromJSON(j.jsonPolicy, configs)
}

// decodeStrict decodes into v the one JSON object r holds, refusing
// malformed JSON, trailing data, duplicate keys and unknown fields, but
// for the configurations under an algorithm's name, which it returns by
// name. An error of r (a body over its bound) is returned as it is.
func decodeStrict(r io.Reader, v any) (configs map[string]json.RawMessage, err error) {
	raw, err := strictjson.Read(r)
	if err != nil {
		return nil, decodeErr(err, "", "a policy")
	}
	if raw[0] != '{' { // null, which would decode as an empty policy, or not an object
		return nil, fmt.Errorf("%w: a policy is a JSON object, got %.20s", ErrInvalidPolicy, raw)
	}
	var top map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &top); err != nil {
		return nil, decodeErr(err, "", "a policy")
	}
	configs = map[string]json.RawMessage{}
	for key, c := range top {
		if _, ok := algo.Fields(key); ok {
			configs[key] = c
			delete(top, key)
		}
	}
	rest, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	return configs, decodeErr(strictjson.Unmarshal(rest, v), "", "a policy")
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

func fromJSON(j jsonPolicy, configs map[string]json.RawMessage) (Policy, error) {
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
	if _, ok := algo.Fields(j.Algorithm); !ok {
		return Policy{}, fieldErr("algorithm", j.Algorithm, "must be one of "+strings.Join(algo.Names(), ", "))
	}
	for _, other := range algo.Names() {
		if other != j.Algorithm && configs[other] != nil {
			return Policy{}, fieldErr(other, "{...}", "is not the policy's algorithm "+strconv.Quote(j.Algorithm))
		}
	}
	raw := configs[j.Algorithm]
	if raw == nil {
		return Policy{}, fieldErr(j.Algorithm, "", "is required: the algorithm's configuration")
	}
	cfg, err := configFrom(j.Algorithm, raw)
	if err != nil {
		return Policy{}, err
	}
	p.Config = cfg
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}
