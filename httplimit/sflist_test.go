package httplimit

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestParseList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []member
		ok   bool
	}{
		{`"a";r=1;t=2`, []member{{"a", map[string]int64{"r": 1, "t": 2}}}, true},
		{`"a,b";r=0, tok;r=3 ,  "q\"\\";x;w=9`, []member{{"a,b", map[string]int64{"r": 0}}, {"tok", map[string]int64{"r": 3}}, {`q"\`, map[string]int64{"w": 9}}}, true},
		{`("x" "y");r=1, "z";r=0;s="str";b=?1;d=1.5;y=:AAA=:`, []member{{"z", map[string]int64{"r": 0}}}, true},
		{`"a";r=1, "b";r=0,`, []member{{"a", map[string]int64{"r": 1}}, {"b", map[string]int64{"r": 0}}}, false},
		{`"a";r=1, "unterminated;r=0`, []member{{"a", map[string]int64{"r": 1}}}, false},
		{`"a";R=1`, nil, false},
		{`"a";r=12345678901234567`, []member{{"a", nil}}, true}, // past 15 digits: not an Integer
	} {
		got, ok := parseList(c.in)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseList(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestExhausted(t *testing.T) {
	for _, c := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Ratelimit": {`"burst";r=5;t=1, "daily";r=0;t=30`}}, 30 * time.Second},
		{http.Header{"Ratelimit": {`"a";r=0;t=10`, `"b";r=0;t=20`}}, 20 * time.Second},
		{http.Header{"Ratelimit": {`"a";r=0`}, "Ratelimit-Policy": {`"a";q=10;w=60`}}, time.Minute},
		{http.Header{"Ratelimit": {`"a";r=0`}}, 0},
		{http.Header{"Ratelimit": {`"a";r=2;t=10`}}, 0},
		{http.Header{"Ratelimit": {`"a";r=0;t=999999999999999`}}, maxPause},
	} {
		if got := exhausted(c.h); got != c.want {
			t.Errorf("exhausted(%v) = %v, want %v", c.h, got, c.want)
		}
	}
}
