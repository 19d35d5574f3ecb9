package main

import (
	"os"
	"regexp"
	"testing"
)

// TestDemoColours: the server's demo page draws each algorithm in the
// report's colour (its COLOURS, in cmd/limitkit/web/common.js), so one
// colour means one algorithm wherever limitkit draws it.
func TestDemoColours(t *testing.T) {
	js, err := os.ReadFile("../cmd/limitkit/web/common.js")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)const COLOURS = \{(.*?)\};`).FindSubmatch(js)
	if block == nil {
		t.Fatal("common.js declares no COLOURS")
	}
	demo := map[string]string{}
	for _, m := range regexp.MustCompile(`'?([a-z-]+)'?: '(#[0-9a-f]{6})'`).FindAllSubmatch(block[1], -1) {
		demo[string(m[1])] = string(m[2])
	}
	for _, a := range algorithms() {
		if got, want := demo[a.name], colour(a.name); got != want {
			t.Errorf("%s: the demo's colour %q, the report's %q", a.name, got, want)
		}
	}
	if len(demo) != len(algorithms()) {
		t.Errorf("the demo colours %d names, the report has %d algorithms: %v", len(demo), len(algorithms()), demo)
	}
}
