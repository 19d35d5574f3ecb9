package timelog

import (
	"math/rand"
	"testing"
)

// naive is the log as a plain slice of grants, for comparison.
type naive struct{ at, permits []int64 }

func (n *naive) expired(now, window int64) int64 {
	var p int64
	for i := range n.at {
		if n.at[i]+window <= now {
			p += n.permits[i]
		}
	}
	return p
}

func (n *naive) drop(now, window int64) int64 {
	p := n.expired(now, window)
	for len(n.at) > 0 && n.at[0]+window <= now {
		n.at, n.permits = n.at[1:], n.permits[1:]
	}
	return p
}

func (n *naive) freed(need, window int64) int64 {
	for i := range n.at {
		if need -= n.permits[i]; need <= 0 {
			return n.at[i] + window
		}
	}
	return -1
}

// TestAgainstNaive: random pushes, drops, refunds and questions, with
// gaps from none to several windows, agree with a plain slice, through
// ring growth and wrap-around.
func TestAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 50; trial++ {
		const window = 100
		var g Log
		var n naive
		now := int64(1000)
		for step := 0; step < 2000; step++ {
			now += rng.Int63n([]int64{1, 10, 50, 400}[rng.Intn(4)])
			at := g.Decide(now)
			if got, want := g.Expired(at, window), n.expired(at, window); got != want {
				t.Fatalf("trial %d step %d: Expired = %d, want %d", trial, step, got, want)
			}
			if got, want := g.Drop(at, window), n.drop(at, window); got != want {
				t.Fatalf("trial %d step %d: Drop = %d, want %d", trial, step, got, want)
			}
			var total int64
			for _, p := range n.permits {
				total += p
			}
			if total > 0 {
				need := 1 + rng.Int63n(total)
				if got, want := g.Freed(need, window), n.freed(need, window); got != want {
					t.Fatalf("trial %d step %d: Freed(%d) = %d, want %d", trial, step, need, got, want)
				}
			}
			switch p := 1 + rng.Int63n(5); {
			case rng.Intn(10) == 0 && len(n.at) > 0: // take back the newest grant
				last := len(n.at) - 1
				if got := g.Refund(at, n.at[last], window, p); got != min(p, n.permits[last]) {
					t.Fatalf("trial %d step %d: Refund = %d, want %d", trial, step, got, min(p, n.permits[last]))
				}
				if n.permits[last] -= min(p, n.permits[last]); n.permits[last] == 0 {
					n.at, n.permits = n.at[:last], n.permits[:last]
				}
			default:
				g.Push(at, p)
				if k := len(n.at) - 1; k >= 0 && n.at[k] == at {
					n.permits[k] += p
				} else {
					n.at, n.permits = append(n.at, at), append(n.permits, p)
				}
			}
			if g.Empty() != (len(n.at) == 0) || (!g.Empty() && g.Newest() != n.at[len(n.at)-1]) {
				t.Fatalf("trial %d step %d: Empty %v, newest differs from %v", trial, step, g.Empty(), n.at)
			}
		}
	}
}
