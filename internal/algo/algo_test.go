package algo_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

var q = ratelimit.Queue{Limit: 7, Order: ratelimit.NewestFirst}

// One configuration of each algorithm, every field set.
var configs = map[string]ratelimit.Config{
	"tokenbucket":   tokenbucket.Config{Rate: 2.5, Burst: 3, Queue: q},
	"fixedwindow":   fixedwindow.Config{Limit: 4, Window: time.Second, Queue: q},
	"slidingwindow": slidingwindow.Config{Limit: 5, Window: time.Minute, Segments: 6, Queue: q},
	"slidinglog":    slidinglog.Config{Limit: 6, Window: time.Hour, Queue: q},
	"concurrency":   concurrency.Config{Limit: 7, Queue: q},
}

func TestNames(t *testing.T) {
	want := []string{"concurrency", "fixedwindow", "slidinglog", "slidingwindow", "tokenbucket"}
	if got := algo.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for name, cfg := range configs {
		if got := algo.Name(cfg); got != name {
			t.Errorf("Name(%T) = %q, want %q", cfg, got, name)
		}
	}
}

// A configuration's values build it again, by its algorithm's name.
func TestValuesBuildTheConfig(t *testing.T) {
	for name, cfg := range configs {
		d, err := algo.Of("test", cfg)
		if err != nil {
			t.Fatal(err)
		}
		values := map[string]any{}
		for _, v := range d.Values() {
			values[v.Name] = v.V
		}
		fields, ok := algo.Fields(name)
		if !ok || len(fields) != len(values) {
			t.Errorf("%s: Fields = %v, %v; Values %v", name, fields, ok, d.Values())
		}
		got, ok := algo.Build(name, values)
		if !ok || got != cfg {
			t.Errorf("%s: Build(%v) = %#v, %v; want %#v", name, values, got, ok, cfg)
		}
		if d.Describe() == "" {
			t.Errorf("%s: no description", name)
		}
	}
	if _, ok := algo.Build("tokenbucket2", nil); ok {
		t.Error("Build of an unknown algorithm")
	}
}

type own struct{ fixedwindow.Config }

func TestOfRefusesWhatIsNoAlgorithm(t *testing.T) {
	var nilTB *tokenbucket.Config
	for name, cfg := range map[string]ratelimit.Config{"nil": nil, "nil pointer": nilTB, "own type": own{}} {
		if _, err := algo.Of("test", cfg); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("%s: Of = %v, want ErrInvalidConfig", name, err)
		}
		if algo.Name(cfg) != "" {
			t.Errorf("%s: has a name", name)
		}
	}
	if d, err := algo.Of("test", &fixedwindow.Config{Limit: 1, Window: time.Second}); err != nil || d.Name() != "fixedwindow" {
		t.Errorf("a pointer to a config: %v, %v", d, err)
	}
}

// The window HTTP's w reports, and the unit of qu.
func TestWindowAndUnit(t *testing.T) {
	for _, tc := range []struct {
		cfg    ratelimit.Config
		window time.Duration
		unit   string
	}{
		{tokenbucket.Config{Rate: 2, Burst: 5}, 2500 * time.Millisecond, ""},
		{tokenbucket.Config{Period: time.Second, PerPeriod: 2, Burst: 5}, 3 * time.Second, ""},
		{tokenbucket.Config{Rate: rate.Inf, Burst: 5}, 0, ""},
		{fixedwindow.Config{Limit: 1, Window: time.Minute}, time.Minute, ""},
		{concurrency.Config{Limit: 1}, 0, "concurrent-requests"},
	} {
		d, err := algo.Of("test", tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if d.Window() != tc.window || d.Unit() != tc.unit {
			t.Errorf("%#v: window %v unit %q, want %v %q", tc.cfg, d.Window(), d.Unit(), tc.window, tc.unit)
		}
	}
}
