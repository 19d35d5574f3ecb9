package base

import (
	"sync"
	"testing"
	"time"
)

// A shorter pause learnt later never cuts a longer one; a longer one
// extends it.
func TestPauseKeepsTheLater(t *testing.T) {
	var m sync.Map
	t0 := time.Unix(1000, 0)
	Pause(&m, "h", t0.Add(time.Hour))
	Pause(&m, "h", t0.Add(time.Second))
	if v, _ := m.Load("h"); !v.(time.Time).Equal(t0.Add(time.Hour)) {
		t.Fatalf("after a shorter pause: %v, want the hour kept", v)
	}
	Pause(&m, "h", t0.Add(2*time.Hour))
	if v, _ := m.Load("h"); !v.(time.Time).Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("after a longer pause: %v, want two hours", v)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 50; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); Pause(&m, "k", t0.Add(time.Duration(i)*time.Second)) }()
	}
	wg.Wait()
	if v, _ := m.Load("k"); !v.(time.Time).Equal(t0.Add(50 * time.Second)) {
		t.Fatalf("after 50 racing pauses: %v, want the longest", v)
	}
}

// Jitter stays within a tenth of the RetryAfter and MaxJitter, and within
// half of the slack before a deadline, so that the retry comes before it.
func TestJitter(t *testing.T) {
	for _, c := range []struct {
		d, left  time.Duration
		deadline bool
		most     time.Duration
	}{
		{time.Second, 0, false, 100 * time.Millisecond},
		{50 * time.Millisecond, 0, false, 5 * time.Millisecond},
		{time.Hour, 0, false, MaxJitter},
		{time.Second, time.Second + 4*time.Millisecond, true, 2 * time.Millisecond},
		{time.Second, time.Second, true, 0},
		{300 * time.Millisecond, 305 * time.Millisecond, true, 2500 * time.Microsecond},
	} {
		seen := time.Duration(-1)
		for range 2000 {
			j := Jitter(c.d, c.left, c.deadline)
			if j < 0 || j > c.most {
				t.Fatalf("Jitter(%v, %v, %v) = %v, want in [0, %v]", c.d, c.left, c.deadline, j, c.most)
			}
			seen = max(seen, j)
		}
		if c.most > 0 && seen == 0 {
			t.Errorf("Jitter(%v, %v, %v): always 0 in 2000 draws", c.d, c.left, c.deadline)
		}
	}
}
