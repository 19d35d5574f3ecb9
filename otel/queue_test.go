package otel_test

import (
	"testing"
	"time"
)

// waitQueued waits, for 5s at the most, until ratelimit.queued_requests
// reads n: a Wait is counted once it has joined the queue, just after it
// can be seen there (Stats, or the timer it arms).
func waitQueued(t *testing.T, m *meter, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if value(m.collect(t), queued) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never read %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkSum checks the sum, in seconds, of the histogram points of name
// whose attributes hold every "key=value" of kv.
func checkSum(t *testing.T, points map[string][]point, name string, want float64, kv ...string) {
	t.Helper()
	var sum float64
	for _, p := range points[name] {
		if matches(p.attrs, kv) {
			sum += p.sum
		}
	}
	if sum != want {
		t.Errorf("%s%v: sum %v s, want %v s", name, kv, sum, want)
	}
}
