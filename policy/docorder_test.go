package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/limitkit/ratelimit/tokenbucket"
)

// A document with several faults is refused for the first in its order,
// as encoding/json finds them, whether the fault is in the policy or in
// its configuration; keys are shown as the document gives them.
func TestDecodeRefusesTheFirstFaultInDocumentOrder(t *testing.T) {
	for _, c := range []struct{ name, doc, field string }{
		{"policy fields", `{"name":5,"algorithm":"fixedwindow","fixedwindow":{"limit":1,"window":"1s"},"key":"ip","apps":"x"}`, "name"},
		{"unknown fields", `{"zzz":1,"name":"a","aaa":2,"algorithm":"fixedwindow","fixedwindow":{"limit":1,"window":"1s"},"key":"ip","apps":["x"]}`, "zzz"},
		{"configuration fields", `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"zz":1,"limit":1,"aa":2,"window":"1s"},"key":"ip","apps":["x"]}`, "fixedwindow.zz"},
		{"a key unescaped", `{"name":"a","<b>":1,"algorithm":"fixedwindow","fixedwindow":{"limit":1,"window":"1s"},"key":"ip","apps":["x"]}`, "<b>"},
	} {
		_, err := Decode(strings.NewReader(c.doc))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want a FieldError naming %s", c.name, err, c.field)
		}
	}
}

// Keys match fields whatever their case, as encoding/json matches them,
// the algorithm's name and its parameters' too; the last one wins.
func TestDecodeMatchesKeysAsEncodingJSON(t *testing.T) {
	p, err := Decode(strings.NewReader(`{"Name":"a","algorithm":"tokenbucket","TokenBucket":{"Rate":10,"burst":3,"Burst":4,"queue":{"Limit":2}},"key":"ip","apps":["x"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := tokenbucket.Config{Rate: 10, Burst: 4}
	want.Queue.Limit = 2
	if p.Name != "a" || p.Config != want {
		t.Errorf("decoded %+v, want name a and %+v", p, want)
	}
}
