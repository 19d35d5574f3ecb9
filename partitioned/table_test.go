package partitioned

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestShardAgainstMap: random inserts and removals, with hashes drawn from
// a few values so that probes collide, wrap around the table and shift back
// on removal, find exactly what a map holds.
func TestShardAgainstMap(t *testing.T) {
	for _, hashes := range []uint32{3, 17, 1 << 31} {
		t.Run(fmt.Sprint(hashes), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(hashes)))
			var st store
			s := shard{slots: make([]uint64, minSlots)}
			want := map[string]uint32{} // key -> place
			seed := maphash.MakeSeed()
			hashOf := func(k string) uint32 {
				return uint32(maphash.String(seed, k))%hashes + 5 // +5: homes near the end of small tables, so probes wrap
			}
			for step := 0; step < 20_000; step++ {
				k := fmt.Sprint(rng.IntN(300))
				h := hashOf(k)
				i, p := s.find(&st, k, h)
				id, ok := want[k]
				if (p != nil) != ok || ok && p != st.at(id) {
					t.Fatalf("step %d: find(%q) = %v, want place %d (held %v)", step, k, p, id, ok)
				}
				switch {
				case !ok && rng.IntN(3) > 0:
					id := st.alloc()
					st.at(id).key = k
					s.insert(i, h, id)
					want[k] = id
				case ok && rng.IntN(2) == 0:
					s.remove(i)
					st.at(id).key = ""
					st.release(id)
					delete(want, k)
				}
				if s.n != len(want) || s.n*4 >= len(s.slots)*3 {
					t.Fatalf("step %d: %d slots used of %d, want %d, under three quarters", step, s.n, len(s.slots), len(want))
				}
			}
			for k, id := range want {
				if _, p := s.find(&st, k, hashOf(k)); p != st.at(id) {
					t.Fatalf("%q lost", k)
				}
			}
			if len(want) == 0 || st.n > 300 {
				t.Fatalf("%d keys at the end, %d places: want some keys, and places reused", len(want), st.n)
			}
		})
	}
}
