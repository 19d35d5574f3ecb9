package ratelimit

import (
	"testing"
	"time"
)

// fiveWords is Lease with the grant's token and the refusal's RetryAfter
// kept apart: the layout Lease does not take.
type fiveWords struct {
	remaining  int64
	retryAfter time.Duration
	token      uint64
	resetAfter time.Duration
	o          *Outcome
}

//go:noinline
func makeFour(o *Outcome, n int64) Lease { return o.Lease(n, 0, time.Duration(n), uint64(n)) }

//go:noinline
func makeFive(o *Outcome, n int64) fiveWords {
	return fiveWords{remaining: n, resetAfter: time.Duration(n), token: uint64(n), o: o}
}

var sinkFour Lease
var sinkFive fiveWords

// BenchmarkLeaseWords: making and returning a grant through a call, as a
// backend does, in Lease's four words against five (a token field of its
// own). Lease keeps four while five is measurably slower here.
func BenchmarkLeaseWords(b *testing.B) {
	o := &Outcome{Limit: 10}
	b.Run("four", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			l := makeFour(o, int64(i))
			if l.remaining < 0 {
				sinkFour = l
			}
		}
	})
	b.Run("five", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			l := makeFive(o, int64(i))
			if l.remaining < 0 {
				sinkFive = l
			}
		}
	})
}
