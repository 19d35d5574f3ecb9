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
