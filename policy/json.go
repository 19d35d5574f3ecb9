package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/strictjson"
)

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
	var m map[string]json.RawMessage // refuses a key given twice, and what is no object
	if err := strictjson.Unmarshal(raw, &m); err != nil {
		return nil, decodeErr(err, alg, alg)
	}
	members, err := strictjson.Members(raw)
	if err != nil {
		return nil, decodeErr(err, alg, alg)
	}
	values := make(map[string]any, len(members))
	for _, m := range members {
		// A key matches a parameter as encoding/json matches a field:
		// whatever its case, the last one winning.
		i := slices.IndexFunc(fields, func(f algo.Field) bool { return strings.EqualFold(f.Name, m.Key) })
		if i < 0 {
			value := string(m.Value)
			if value[0] == '{' || value[0] == '[' {
				value = value[:1] + "..." + value[len(value)-1:]
			}
			return nil, &FieldError{Field: alg + "." + m.Key, Value: value, Reason: "is not a field of " + alg}
		}
		f, raw := fields[i], m.Value
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
		case algo.Text:
			var v string
			if err = strictjson.Unmarshal(raw, &v); err == nil && f.Choices != nil && !slices.Contains(f.Choices, v) {
				return nil, fieldErr(alg+"."+f.Name, v, "must be one of "+strings.Join(f.Choices, ", "))
			}
			values[f.Name] = v
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
	var top map[string]json.RawMessage // refuses a key given twice
	if err := strictjson.Unmarshal(raw, &top); err != nil {
		return nil, decodeErr(err, "", "a policy")
	}
	members, err := strictjson.Members(raw)
	if err != nil {
		return nil, decodeErr(err, "", "a policy")
	}
	// A key matches an algorithm's name as encoding/json matches a field's:
	// whatever its case, the last one winning.
	configs = map[string]json.RawMessage{}
	rest := members[:0]
	for _, m := range members {
		if name, ok := algorithmNamed(m.Key); ok {
			configs[name] = m.Value
		} else {
			rest = append(rest, m)
		}
	}
	return configs, decodeErr(strictjson.Unmarshal(strictjson.Object(rest), v), "", "a policy")
}

// algorithmNamed is the registered algorithm whose name key is, whatever
// its case.
func algorithmNamed(key string) (string, bool) {
	for _, name := range algo.Names() {
		if strings.EqualFold(key, name) {
			return name, true
		}
	}
	return "", false
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
