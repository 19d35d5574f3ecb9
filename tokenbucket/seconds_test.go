package tokenbucket

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// seconds must equal time.Duration.Seconds bit for bit: the x/time/rate
// parity depends on it.
func TestSecondsIsDurationSeconds(t *testing.T) {
	ds := []int64{0, 1, 999_999_999, int64(time.Second), int64(time.Second) + 1, 1<<53 + 1, math.MaxInt64}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 1_000_000; i++ {
		ds = append(ds, r.Int63n(3*int64(time.Second)), r.Int63())
	}
	for _, d := range ds {
		if got, want := seconds(d), time.Duration(d).Seconds(); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("seconds(%d) = %v, Seconds() = %v", d, got, want)
		}
	}
}
