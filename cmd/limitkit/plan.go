package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
)

// plan is when a run's requests are sent, as offsets from origin, and how
// the page should slice time for its chart.
type plan struct {
	origin time.Time
	at     []time.Duration
	slice  time.Duration
	edge   time.Duration // edge scenario: the window edge, from origin
}

func schedule(t traffic, window time.Duration, now time.Time) plan {
	switch t.Mode {
	case "one":
		return plan{origin: now, at: []time.Duration{0}, slice: 100 * time.Millisecond}
	case "burst":
		return plan{origin: now, at: make([]time.Duration, t.N), slice: 100 * time.Millisecond}
	case "steady":
		n := int(math.Floor(t.Rate * t.Seconds))
		p := plan{origin: now, at: make([]time.Duration, n)}
		for i := range p.at {
			p.at[i] = time.Duration(float64(i) / t.Rate * float64(time.Second))
		}
		total := time.Duration(t.Seconds * float64(time.Second))
		p.slice = max(100*time.Millisecond, (total / 20).Round(50*time.Millisecond))
		return p
	}
	// edge: half the requests just before a window edge (aligned to the
	// Unix epoch, as every backend's windows are), half just after. The
	// edge is the end of a window that starts after now+delta, so that no
	// earlier request of the session counts in the window of the first
	// half (nor, for a sliding log, in the window before it).
	delta := min(window/10, 100*time.Millisecond)
	slice := 2 * delta
	edge := time.Unix(0, (now.Add(delta).UnixNano()/int64(window)+2)*int64(window))
	origin := edge.Add(-2 * slice)
	p := plan{origin: origin, slice: slice, edge: 2 * slice}
	for range t.N {
		p.at = append(p.at, 2*slice-delta)
	}
	for range t.N {
		p.at = append(p.at, 2*slice+delta)
	}
	return p
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func writeEvent(w io.Writer, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}
