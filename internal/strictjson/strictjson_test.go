package strictjson

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

type queue struct {
	Limit int `json:"limit"`
}

type doc struct {
	Rate  *float64 `json:"rate"`
	Burst int      `json:"burst"`
	Apps  []string `json:"apps"`
	Queue *queue   `json:"queue"`
	On    bool     `json:"on"`
	Name  string   `json:"name"`
}

func TestUnmarshalRefuses(t *testing.T) {
	for _, c := range []struct {
		doc, field, value, reason string
	}{
		{`{"rate":"NaN"}`, "rate", `"NaN"`, "must be a number, not a string"},
		{`{"rate": {"x": 1}}`, "rate", "{...}", "must be a number, not a JSON object"},
		{`{"rate":1e400}`, "rate", "1e400", "is out of range for a number"},
		{`{"burst": 1.5 }`, "burst", "1.5", "must be a whole number"},
		{`{"burst":1e30}`, "burst", "1e30", "is out of range for an integer"},
		{`{"burst":true}`, "burst", "true", "must be an integer, not true or false"},
		{`{"burst":null, "name": 3}`, "name", "3", "must be a string, not a number"},
		{`{"apps":["a", 3]}`, "apps[1]", "3", "must be a string, not a number"},
		{`{"apps":"a"}`, "apps", `"a"`, "must be a JSON array of strings, not a string"},
		{`{"queue":{"limit":"x"}}`, "queue.limit", `"x"`, "must be an integer, not a string"},
		{`{"queue":[1]}`, "queue", "[...]", "must be a JSON object, not a JSON array"},
		{`{"on":"yes"}`, "on", `"yes"`, "must be true or false, not a string"},
		{`{"name":"` + strings.Repeat("é", 40) + `", "burst": "` + strings.Repeat("é", 40) + `"}`, "burst", `"` + strings.Repeat("é", 32) + `..."`, "must be an integer, not a string"},
		{`{"name":"<a>\u0000", "burst":"<a>\u0000"}`, "burst", `"<a>\u0000"`, "must be an integer, not a string"},
		{`[1]`, "", "[...]", "must be a JSON object, not a JSON array"},
		{`{"burst":1,"burst":2}`, "burst", "", "appears twice: give each field once"},
		{`{"queue":{"limit":1,"limit":2}}`, "queue.limit", "", "appears twice: give each field once"},
		{`{"apps":[{"a":1},{"a":1,"a":2}]}`, "apps[1].a", "", "appears twice: give each field once"},
		{`{"owner":1}`, "owner", "", "is not a known field"},
		{`{"burst":1} {}`, "", "", "trailing data after the JSON value"},
		{`{"burst":1}}`, "", "", "trailing data after the JSON value"},
		{`{"burst":1`, "", "", "malformed JSON: unexpected EOF"},
		{` `, "", "", "malformed JSON: the document is empty"},
	} {
		var d doc
		err := Unmarshal([]byte(c.doc), &d)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want an *Error", c.doc, err)
			continue
		}
		if e.Field != c.field || e.Value != c.value || e.Reason != c.reason {
			t.Errorf("%s: field %q value %q reason %q; want %q %q %q", c.doc, e.Field, e.Value, e.Reason, c.field, c.value, c.reason)
		}
	}
}

func TestUnmarshalAccepts(t *testing.T) {
	var d doc
	// The same key in two objects is no duplicate.
	if err := Unmarshal([]byte(`{"burst":2,"queue":{"limit":3},"apps":["a","a"],"name":"x"}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.Burst != 2 || d.Queue.Limit != 3 || len(d.Apps) != 2 {
		t.Fatalf("%+v", d)
	}
}

// duration refuses what it is given as policy.Duration does: a
// *json.UnmarshalTypeError whose Value is the literal.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeOf(time.Duration(0))}
}

func TestUnmarshalNamesDurations(t *testing.T) {
	var d struct {
		Queue struct {
			Hold duration `json:"hold"`
		} `json:"queue"`
	}
	for _, c := range []struct{ doc, value, reason string }{
		{`{"queue":{"hold":1000}}`, "1000", `must be a duration such as "1m30s", not a number`},
		{`{"queue":{"hold":"soon"}}`, `"soon"`, `must be a duration such as "1m30s"`},
	} {
		var e *Error
		if err := Unmarshal([]byte(c.doc), &d); !errors.As(err, &e) || e.Field != "queue.hold" || e.Value != c.value || e.Reason != c.reason {
			t.Errorf("%s: %v %#v", c.doc, err, e)
		}
	}
}

func TestReadReturnsReadErrors(t *testing.T) {
	// A valid document followed by white space beyond the bound is over
	// the bound, not trailing data.
	body := `{"burst":1}` + strings.Repeat(" ", 8192)
	r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 4096)
	var d doc
	err := Decode(r, &d)
	var mb *http.MaxBytesError
	if !errors.As(err, &mb) {
		t.Fatalf("got %v, want the *http.MaxBytesError", err)
	}
	// Within the bound, it is read.
	r = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 1<<20)
	if err := Decode(r, &d); err != nil || d.Burst != 1 {
		t.Fatalf("%v %+v", err, d)
	}
	// A value cut by the bound is over it too.
	r = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(`{"name":"`+strings.Repeat("x", 8192)+`"}`)), 4096)
	if err := Decode(r, &d); !errors.As(err, &mb) {
		t.Fatalf("got %v, want the *http.MaxBytesError", err)
	}
}

// Members keeps the document's order and values; Object gives them back
// as one object, keys unescaped.
func TestMembersAndObject(t *testing.T) {
	doc := []byte(`{"b": 1, "a<x>": {"c": [1, 2]}, "z": "1m"}`)
	ms, err := Members(doc)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range ms {
		keys = append(keys, m.Key+"="+string(m.Value))
	}
	if got, want := strings.Join(keys, " "), `b=1 a<x>={"c": [1, 2]} z="1m"`; got != want {
		t.Errorf("Members: %s, want %s", got, want)
	}
	if got, want := string(Object(ms)), `{"b":1,"a<x>":{"c": [1, 2]},"z":"1m"}`; got != want {
		t.Errorf("Object: %s, want %s", got, want)
	}
	if _, err := Members([]byte(`[1]`)); err == nil {
		t.Error("Members of an array")
	}
}
