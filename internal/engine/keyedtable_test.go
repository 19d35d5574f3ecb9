package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// A shard's table against a Go map, under random inserts, removals (of a
// found key, of a used slot picked at random as the sweeper meets them)
// and shrinks, with hashes of few distinct low bits, so that keys collide,
// runs of slots wrap around the table's end, and removals shift them
// back: every key is found with its own state, no other is, and the table
// holds exactly the keys, at most three quarters full.
func TestKeyedTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var sh shard[int64]
	sh.slots = make([]slot[int64], minSlots)
	want := map[string]int64{}
	hash := func(k string) uint32 {
		var h uint32 = 2166136261
		for i := 0; i < len(k); i++ {
			h = (h ^ uint32(k[i])) * 16777619
		}
		return h & 0x8000003f // 64 homes at most, in any table: long runs
	}
	check := func(step int) {
		t.Helper()
		used := 0
		for _, sl := range sh.slots {
			if sl.used {
				used++
				if _, in := want[sl.key]; !in || sl.h != hash(sl.key) {
					t.Fatalf("step %d: a slot of %q, hash %#x, not a key of the map's or not its hash", step, sl.key, sl.h)
				}
			}
		}
		n := len(sh.slots)
		if used != len(want) || sh.n != used || n&(n-1) != 0 || used*4 >= n*3 {
			t.Fatalf("step %d: %d slots used (n %d) of %d, for %d keys", step, used, sh.n, n, len(want))
		}
		for k, v := range want {
			i, ok := sh.find(k, hash(k))
			if !ok || sh.slots[i].key != k || sh.slots[i].s != v {
				t.Fatalf("step %d: %q: found %v at %d, want its state %d", step, k, ok, i, v)
			}
		}
	}
	for step := 0; step < 20000; step++ {
		k := fmt.Sprint(rng.IntN(600))
		switch op := rng.IntN(10); {
		case op < 5: // a decision: find, then insert or write in place
			if i, ok := sh.find(k, hash(k)); ok {
				sh.slots[i].s++
				want[k]++
			} else {
				if _, in := want[k]; in {
					t.Fatalf("step %d: %q not found", step, k)
				}
				sh.insert(k, hash(k), 1)
				want[k] = 1
			}
		case op < 8: // a removal of a key found
			if i, ok := sh.find(k, hash(k)); ok {
				sh.remove(i)
				delete(want, k)
			}
		case op < 9: // the sweeper's: a used slot met in the table
			if i := rng.IntN(len(sh.slots)); sh.slots[i].used {
				delete(want, sh.slots[i].key)
				sh.remove(i)
			}
		default:
			sh.shrink()
		}
		if _, ok := sh.find("absent", hash("absent")); ok {
			t.Fatalf("step %d: a key never inserted is found", step)
		}
		if step%97 == 0 || len(want) < 3 {
			check(step)
		}
	}
	check(-1)
	for i := 0; i < len(sh.slots); { // down to nothing, then shrunk
		if !sh.slots[i].used {
			i++
			continue
		}
		delete(want, sh.slots[i].key)
		sh.remove(i) // a later slot may move back into i
	}
	sh.shrink()
	check(-2)
	if len(sh.slots) != minSlots {
		t.Errorf("emptied and shrunk: %d slots, want %d", len(sh.slots), minSlots)
	}
}
