package partitioned

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"sync"
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

// BenchmarkIndex is what keeps the shards' hand-written table (see
// table.go): on 1,000,000 keys in 64 shards, a lookup under the shard's
// read lock that reads the partition's limiter, in creation order and in
// random order, and the heap per key of the index and its records (the
// limiters aside: every key shares one), for the table over the store's
// records against a Go map per shard of individually allocated records.
func BenchmarkIndex(b *testing.B) {
	const keys = 1_000_000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	shuffled := append([]string(nil), names...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(keys, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	seed := maphash.MakeSeed()
	hash := func(key string) (int, uint32) {
		h := maphash.String(seed, key)
		return int(h >> 58), uint32(h)
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	lim := NoLimit()
	// run fills an index with every key, then looks them up in both orders.
	run := func(b *testing.B, fill func(), lookup func(key string) bool) {
		h0 := heap()
		fill()
		perKey := float64(heap()-h0) / keys
		for _, order := range []struct {
			name string
			keys []string
		}{{"creation-order", names}, {"random-order", shuffled}} {
			b.Run(order.name, func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					if !lookup(order.keys[i%keys]) {
						b.Fatal("key lost")
					}
				}
				b.ReportMetric(perKey, "heap-B/key")
			})
		}
	}
	b.Run("table", func(b *testing.B) {
		var st store
		var idx [shards]shard
		run(b, func() {
			for i := range idx {
				idx[i].slots = make([]uint64, minSlots)
			}
			for _, k := range names {
				si, h := hash(k)
				s := &idx[si]
				i, _ := s.find(&st, k, h)
				id := st.alloc()
				p := st.at(id)
				p.key, p.limiter = k, lim
				s.insert(i, h, id)
			}
		}, func(k string) bool {
			si, h := hash(k)
			s := &idx[si]
			s.mu.RLock()
			_, p := s.find(&st, k, h)
			ok := p != nil && p.limiter != nil
			s.mu.RUnlock()
			return ok
		})
		runtime.KeepAlive(&idx)
	})
	b.Run("map", func(b *testing.B) {
		type mapShard struct {
			mu sync.RWMutex
			m  map[string]*partition
		}
		var idx [shards]mapShard
		run(b, func() {
			for i := range idx {
				idx[i].m = map[string]*partition{}
			}
			for _, k := range names {
				si, _ := hash(k)
				idx[si].m[k] = &partition{key: k, limiter: lim}
			}
		}, func(k string) bool {
			si, _ := hash(k)
			s := &idx[si]
			s.mu.RLock()
			p := s.m[k]
			ok := p != nil && p.limiter != nil
			s.mu.RUnlock()
			return ok
		})
		runtime.KeepAlive(&idx)
	})
}
