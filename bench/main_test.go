package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProgram runs the comparison for a few seconds of simulated traffic and
// checks the report and the truths any correct run must show.
func TestProgram(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.html")
	var stdout bytes.Buffer
	c := config{duration: 3 * time.Second, out: out, seed: 1,
		scenarios: map[string]bool{"accuracy": true, "scaleout": true}}
	if err := run(c, &stdout, func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), "<svg"); n != 3*6 {
		t.Errorf("report has %d plots, want one per rate algorithm and accuracy scenario (18)", n)
	}
	if !strings.Contains(stdout.String(), "## Accuracy: boundary") || !strings.Contains(stdout.String(), "| fixedwindow |") {
		t.Errorf("markdown lacks the accuracy tables:\n%s", stdout.String())
	}
	// Re-run the scenarios to read the figures (run only prints them).
	for _, b := range []*backend{{name: "memory"}} {
		for _, tr := range scenarios(3*time.Second, randSource(1)) {
			for _, a := range algorithms() {
				if !a.rate {
					continue
				}
				r, err := simulate(b, a, tr, 3*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if a.name == "slidinglog" && r.maxWindow > 1 {
					t.Errorf("%s: sliding log admitted %.2fx the limit in a window", tr.name, r.maxWindow)
				}
				if a.name == "fixedwindow" && tr.name == "boundary" && r.maxWindow < 1.9 {
					t.Errorf("boundary burst: fixed window admitted only %.2fx the limit in a window, want about 2x", r.maxWindow)
				}
			}
		}
	}
	mini := miniBackend(t)
	for _, a := range algorithms() {
		if !a.rate || a.name == "tokenbucket" || a.name == "tokenbucket-interval" {
			continue // buckets admit their burst on top of the rate
		}
		shared, err := simulateScaleOut(mini, a, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		local, err := simulateScaleOut(&backend{name: "memory"}, a, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if shared.perSecond > limit {
			t.Errorf("%s: three replicas sharing Redis admitted %.0f/s, limit %d", a.name, shared.perSecond, limit)
		}
		if local.perSecond < 2.9*limit {
			t.Errorf("%s: three memory replicas admitted %.0f/s, want about 3x the limit", a.name, local.perSecond)
		}
	}
}
