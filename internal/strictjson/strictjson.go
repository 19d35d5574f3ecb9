// Package strictjson decodes the JSON documents that people write (the
// policy package's policies, the limitkit server's request bodies) strictly,
// and says what is wrong in JSON's words: malformed JSON, trailing data,
// duplicate keys and unknown fields are refused, and a value of the wrong
// type is named as the document gives it, with the type it is and the type
// wanted ("rate" "NaN": must be a number, not a string), never with a Go
// type's name.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error is a document refused. Field is the path of the value refused,
// keys joined by dots and array indices in brackets ("tokenbucket.rate",
// "apps[1]"), "" for the document itself (malformed JSON, trailing data, a
// document of the wrong type); Value is the value as the document gives
// it ("\"NaN\"", "1e400", "{...}" for an object, "[...]" for an array), ""
// when the error is about a key; Reason says what is wrong, in JSON's words.
type Error struct {
	Field  string
	Value  string
	Reason string
	Err    error // encoding/json's error, if any
}

// Error is "field value: reason", or the reason alone when there is no field.
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	if e.Value == "" {
		return e.Field + ": " + e.Reason
	}
	return e.Field + " " + e.Value + ": " + e.Reason
}

// Unwrap returns encoding/json's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Read reads one JSON value from r and returns it, refusing malformed JSON
// and trailing data (anything but white space after the value) with an
// *Error. An error of r (a body over its bound, an *http.MaxBytesError) is
// returned as r gave it, also when it comes while looking for trailing
// data: white space beyond a bound is over the bound, not trailing data.
func Read(r io.Reader) ([]byte, error) {
	dec := json.NewDecoder(r)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if err == io.EOF {
			return nil, &Error{Reason: "malformed JSON: the document is empty", Err: err}
		}
		if isSyntax(err) {
			return nil, &Error{Reason: "malformed JSON: " + err.Error(), Err: err}
		}
		return nil, err
	}
	switch _, err := dec.Token(); {
	case err == io.EOF:
		return raw, nil
	case err == nil || isSyntax(err):
		return nil, &Error{Reason: "trailing data after the JSON value"}
	default:
		return nil, err
	}
}

// isSyntax reports whether err is about the JSON rather than its reader.
func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Decode reads one JSON value from r (see Read) and decodes it into v (see
// Unmarshal).
func Decode(r io.Reader, v any) error {
	doc, err := Read(r)
	if err != nil {
		return err
	}
	return Unmarshal(doc, v)
}

// Unmarshal decodes doc, one JSON value, into v as encoding/json does, but
// refuses with an *Error a key that appears twice in an object (encoding/json
// keeps the last), a key that is no field of v's structs, and a value of
// the wrong type, naming it as the document gives it. A value that an
// UnmarshalJSON method refuses with a *json.UnmarshalTypeError should give
// its literal as the error's Value (policy.Duration does).
func Unmarshal(doc []byte, v any) error {
	if err := checkKeys(doc); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return typeError(doc, te)
	}
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return &Error{Field: strings.TrimSuffix(name, `"`), Reason: "is not a known field", Err: err}
	}
	if isSyntax(err) {
		return &Error{Reason: "malformed JSON: " + err.Error(), Err: err}
	}
	return err
}

// walk calls visit with each token of doc, the path of the value it
// starts or is (a key's token has the path of its value), and the offset
// just after it, until visit returns false; it refuses a key that appears
// twice in an object, malformed JSON and trailing data.
func walk(doc []byte, visit func(path string, tok json.Token, end int64) bool) error {
	type frame struct {
		path   string
		object bool
		keys   map[string]bool
		n      int    // elements seen (arrays)
		key    string // the object's key awaiting its value
		keyed  bool
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var stack []*frame
	// pathOf is the path of the value that comes next.
	pathOf := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.object {
			if f.path == "" {
				return f.key
			}
			return f.path + "." + f.key
		}
		return f.path + "[" + strconv.Itoa(f.n) + "]"
	}
	// done notes that a value of the innermost container was read.
	done := func() {
		if len(stack) > 0 {
			f := stack[len(stack)-1]
			f.keyed = false
			f.n++
		}
	}
	for started := false; ; {
		tok, err := dec.Token()
		if err == io.EOF {
			if !started {
				return &Error{Reason: "malformed JSON: the document is empty", Err: err}
			}
			return nil
		}
		if err != nil {
			if isSyntax(err) && started && len(stack) == 0 {
				return &Error{Reason: "trailing data after the JSON value", Err: err}
			}
			return &Error{Reason: "malformed JSON: " + err.Error(), Err: err}
		}
		if started && len(stack) == 0 {
			return &Error{Reason: "trailing data after the JSON value"}
		}
		started = true
		end := dec.InputOffset()
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && !top.keyed {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				done()
				if !visit(top.path, tok, end) {
					return nil
				}
				continue
			}
			key := tok.(string) // the decoder gives only strings here
			top.key, top.keyed = key, true
			if top.keys[key] {
				return &Error{Field: pathOf(), Reason: "appears twice: give each field once"}
			}
			top.keys[key] = true
			if !visit(pathOf(), tok, end) {
				return nil
			}
			continue
		}
		path := pathOf()
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{path: path, object: true, keys: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{path: path})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			path = top.path
			done()
		default:
			done()
		}
		if !visit(path, tok, end) {
			return nil
		}
	}
}

func checkKeys(doc []byte) error {
	return walk(doc, func(string, json.Token, int64) bool { return true })
}

// literal finds the value of doc that ends at offset (an
// *json.UnmarshalTypeError's Offset: just after a literal, or just after
// the opening of an object or array) and returns its path and text.
func literal(doc []byte, offset int64) (path, text string, ok bool) {
	walk(doc, func(p string, tok json.Token, end int64) bool {
		if end != offset {
			return end < offset
		}
		switch tok {
		case json.Delim('{'):
			path, text, ok = p, "{...}", true
		case json.Delim('['):
			path, text, ok = p, "[...]", true
		case json.Delim('}'), json.Delim(']'):
		default:
			path, text, ok = p, show(tok), true
		}
		return false
	})
	return path, text, ok
}

// maxShown bounds the bytes of a string shown in an error.
const maxShown = 64

// show is a scalar token as JSON text; a long string is cut, with "...".
func show(tok json.Token) string {
	switch t := tok.(type) {
	case json.Number:
		return t.String()
	case bool:
		return strconv.FormatBool(t)
	case nil:
		return "null"
	case string:
		if len(t) > maxShown {
			cut := maxShown
			for cut > 0 && !utf8.RuneStart(t[cut]) {
				cut--
			}
			t = t[:cut] + "..."
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(t)
		return strings.TrimSuffix(b.String(), "\n")
	}
	return ""
}

var durationType = reflect.TypeOf(time.Duration(0))

// typeError says what te refuses, in JSON's words.
func typeError(doc []byte, te *json.UnmarshalTypeError) *Error {
	field, text, given := te.Field, "", ""
	switch p, t, ok := literal(doc, te.Offset); {
	case te.Type == durationType:
		// An UnmarshalJSON method's error (policy.Duration's): its
		// Value is the literal, its Offset unknown.
		text = te.Value
		given = kindOf(text)
	case ok:
		field, text = p, t
		given = kindOf(text)
	default:
		// encoding/json's Value: "string", "number 1.5", "object", ...
		kind, num, _ := strings.Cut(te.Value, " ")
		text = num
		given = map[string]string{"string": "a string", "number": "a number", "bool": "true or false",
			"object": "a JSON object", "array": "a JSON array"}[kind]
		if given == "" {
			given = "that"
		}
	}
	e := &Error{Field: field, Value: text, Err: te}
	want := wanted(te.Type)
	switch {
	case given == "a number" && isInteger(te.Type):
		if f, err := strconv.ParseFloat(text, 64); err == nil && f != math.Trunc(f) {
			e.Reason = "must be a whole number"
		} else {
			e.Reason = "is out of range for an integer"
		}
	case given == "a number" && isFloat(te.Type):
		e.Reason = "is out of range for a number"
	case given == "a string" && te.Type == durationType:
		e.Reason = "must be " + want
	default:
		e.Reason = "must be " + want + ", not " + given
	}
	return e
}

// kindOf names the JSON type of a literal.
func kindOf(text string) string {
	switch {
	case text == "":
		return "that"
	case text[0] == '"':
		return "a string"
	case text[0] == '{':
		return "a JSON object"
	case text[0] == '[':
		return "a JSON array"
	case text == "true" || text == "false":
		return "true or false"
	case text == "null":
		return "null"
	}
	return "a number"
}

func isInteger(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return t != durationType
	}
	return false
}

func isFloat(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64
}

// wanted names what a Go type takes in JSON.
func wanted(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		return `a duration such as "1m30s"`
	case isInteger(t):
		return "an integer"
	case isFloat(t):
		return "a number"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "a JSON array of strings"
		}
		return "a JSON array"
	}
	return "another value"
}

// Member is a key of a JSON object and its value, as the document gives it.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Members returns the members of doc, in the document's order; doc must be
// a JSON object that Unmarshal accepts into a map (so no key appears twice).
// A doc that is no object is an *Error.
func Members(doc []byte) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, &Error{Reason: "must be a JSON object", Err: err}
	}
	var ms []Member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, &Error{Reason: "malformed JSON: " + err.Error(), Err: err}
		}
		m := Member{Key: tok.(string)}
		if err := dec.Decode(&m.Value); err != nil {
			return nil, &Error{Reason: "malformed JSON: " + err.Error(), Err: err}
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// Object is the JSON object of ms, in their order, each value as given:
// what Unmarshal reads as it would the document ms came from.
func Object(ms []Member) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a key is shown in errors as the document gave it
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		enc.Encode(m.Key) // a string always encodes
		b.Truncate(b.Len() - 1)
		b.WriteByte(':')
		b.Write(m.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}
