package base

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A shorter pause learnt later never cuts a longer one; a longer one
// extends it.
func TestPauseKeepsTheLater(t *testing.T) {
	var p Pauses
	t0 := time.Unix(1000, 0)
	p.Pause("h", t0.Add(time.Hour), t0)
	p.Pause("h", t0.Add(time.Second), t0)
	if v, _ := p.m.Load("h"); !v.(time.Time).Equal(t0.Add(time.Hour)) {
		t.Fatalf("after a shorter pause: %v, want the hour kept", v)
	}
	p.Pause("h", t0.Add(2*time.Hour), t0)
	if v, _ := p.m.Load("h"); !v.(time.Time).Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("after a longer pause: %v, want two hours", v)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 50; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); p.Pause("k", t0.Add(time.Duration(i)*time.Second), t0) }()
	}
	wg.Wait()
	if v, _ := p.m.Load("k"); !v.(time.Time).Equal(t0.Add(50 * time.Second)) {
		t.Fatalf("after 50 racing pauses: %v, want the longest", v)
	}
}

// The pauses of keys never asked again are forgotten once they end: the
// pauses held stay at most the live ones and one sweep's worth.
func TestPausesForgetTheEnded(t *testing.T) {
	var p Pauses
	held := func() (n int) {
		p.m.Range(func(any, any) bool { n++; return true })
		return n
	}
	t0 := time.Unix(1000, 0)
	p.Pause("live", t0.Add(time.Hour), t0)
	now := t0
	// With "live", 100 sweeps' worth of pauses: the last one sweeps.
	for i := range 100*sweepEvery - 1 {
		now = now.Add(time.Millisecond)
		p.Pause(fmt.Sprint("k", i), now.Add(time.Second), now) // each ends a second after it is learnt
		if i%97 == 0 {
			if n := held(); n > 1+1000+sweepEvery {
				t.Fatalf("after %d pauses: %d held", i+1, n)
			}
		}
	}
	if _, ok := p.m.Load("live"); !ok {
		t.Fatal("a pause that has not ended was forgotten")
	}
	// At the last sweep, the pauses of the last second were live: 1,000
	// of them, the hour's, and none of the ended ones.
	if n := held(); n != 1+1000 {
		t.Fatalf("%d pauses held after the last sweep, want 1001", n)
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

// PollDelay: a known RetryAfter and its jitter, refused before a deadline
// that comes first; a doubling backoff otherwise, capped; never past the
// deadline.
func TestPollDelay(t *testing.T) {
	left := func(d time.Duration) func(time.Time) time.Duration {
		return func(time.Time) time.Duration { return d }
	}
	bg := context.Background()
	short, cancel := context.WithTimeout(bg, time.Hour) // its time left is what left says
	defer cancel()
	backoff := time.Millisecond
	if _, ok := PollDelay(short, time.Second, true, &backoff, left(999*time.Millisecond)); ok {
		t.Error("a RetryAfter past the deadline: want it refused")
	}
	for range 100 {
		if d, ok := PollDelay(bg, time.Second, true, &backoff, nil); !ok || d < time.Second || d > time.Second+100*time.Millisecond {
			t.Fatalf("RetryAfter 1s, no deadline: %v %v", d, ok)
		}
		if d, ok := PollDelay(short, time.Second, true, &backoff, left(1100*time.Millisecond)); !ok || d < time.Second || d > 1050*time.Millisecond {
			t.Fatalf("RetryAfter 1s, 1.1s left: %v %v, want at most half the slack added", d, ok)
		}
	}
	var got []time.Duration
	for range 8 {
		d, ok := PollDelay(bg, 0, false, &backoff, nil)
		if !ok {
			t.Fatal("no RetryAfter: refused")
		}
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoffs %v, want %v ms", got, want)
		}
	}
	if d, _ := PollDelay(short, 0, false, &backoff, left(3*time.Millisecond)); d != 3*time.Millisecond {
		t.Errorf("a backoff of 50ms with 3ms left: %v, want 3ms", d)
	}
}
