package engine

// The index of a store's shard is a hand-written open-addressing table
// (linear probing, backward-shift deletion) whose slot holds the key and
// its model's state: 48 bytes for a token bucket. BenchmarkPartitioned (the
// bench module's, 1,000,000 keys) is what keeps it over the plainest
// structure, a Go map per shard, map[string]entry, measured first: a swiss
// table reads a group's control word and then the slot, on another cache
// line for entries this large, and a decision looks the key up twice (read,
// then store back), where here it reads one slot (one line, or two
// adjacent) and writes the state in place. In one run the map took 1.35x
// go-limiter's time per decision in creation order and 1.27x in random
// order, with 117 bytes per key; this table takes 0.97x and 0.96x (medians
// of 5 alternated rounds), with 101 bytes (README.md). A compact table of
// 8-byte references (hash, place) over each shard's entries in the order
// they came, as partitioned's index is, was measured too: 76 bytes per key,
// but 0.94x to 0.99x in creation order (a shard's entries are sequential,
// successive keys are in other shards) and 1.20x to 1.29x in random order
// (the reference is one more miss). With the entries of every shard in one
// store-wide sequence, in the order keys came (partitioned's store): 59
// bytes per key and 0.53x to 0.79x in creation order, but 0.80x to 1.25x in
// random order (1.11x the median of 11 runs): a decision there reads the
// key's bytes, the reference and the entry, each in a place of its own,
// where here it reads the key's bytes and the slot. Built again in a
// package of its own (8-byte references per shard, one pool of 40-byte
// entries for the store, compacted by the sweeper), 4 runs: 59 bytes per
// key, 0.48x to 0.70x in creation order, 1.20x to 1.27x in random order. It
// reached 0.89x to 0.91x in random order only with the clock read after the
// hash and the hit path cut short (a token bucket's refill and the grant's
// lease inlined, without the model's Made): a decision short enough lets
// the next key's first miss start while the last entry is on its way.
// Made's call alone put it back at 1.21x, and the made instant carried in
// the Decision instead (a fifth field) at 1.07x to 1.09x: that gain depends
// on a processor's reorder window, not on the layout, and was not kept.
// Slots padded to a whole cache line (134 bytes per key) were no faster in
// either order.

// slot is one key of a shard and its state; used is false in an empty
// slot. The key shares the caller's bytes, as a Go map's key does. h is
// the low 32 bits of the key's hash: its home slot, and a filter before
// the key is compared.
type slot[S any] struct {
	key  string
	h    uint32
	used bool
	s    S
}

const minSlots = 8

// find returns the slot of key, whose hash is h, or ok false when key has
// no slot. Requires sh.mu.
func (sh *shard[S]) find(key string, h uint32) (i int, ok bool) {
	mask := len(sh.slots) - 1
	for i = int(h) & mask; ; i = (i + 1) & mask {
		sl := &sh.slots[i]
		if !sl.used {
			return i, false
		}
		if sl.h == h && sl.key == key { // the bytes are not read when they are the caller's
			return i, true
		}
	}
}

// insert adds key, whose hash is h and which has no slot, with state st,
// growing the table when it is three quarters full. Requires sh.mu.
func (sh *shard[S]) insert(key string, h uint32, st S) {
	sh.place(slot[S]{key: key, h: h, used: true, s: st})
	if sh.n++; sh.n*4 >= len(sh.slots)*3 {
		sh.resize(2 * len(sh.slots))
	}
	if sh.n+len(sh.held) > sh.peak {
		sh.peak = sh.n + len(sh.held)
	}
}

// place puts v in the first empty slot from its home. Requires sh.mu.
func (sh *shard[S]) place(v slot[S]) {
	mask := len(sh.slots) - 1
	i := int(v.h) & mask
	for sh.slots[i].used {
		i = (i + 1) & mask
	}
	sh.slots[i] = v
}

// resize moves the slots to a table of size slots. Requires sh.mu.
func (sh *shard[S]) resize(size int) {
	old := sh.slots
	sh.slots = make([]slot[S], size)
	for i := range old {
		if old[i].used {
			sh.place(old[i])
		}
	}
}

// remove empties slot i, moving back the slots after it that would no
// longer be found (backward-shift deletion: no tombstones). The slots that
// move land at i or after it, never before. Requires sh.mu.
func (sh *shard[S]) remove(i int) {
	mask := len(sh.slots) - 1
	sh.n--
	for j := i; ; {
		sh.slots[i] = slot[S]{}
		for {
			j = (j + 1) & mask
			v := &sh.slots[j]
			if !v.used {
				return
			}
			// v may fill the hole at i unless its home lies in (i, j], cyclically.
			if home := int(v.h) & mask; (home-i-1)&mask >= (j-i)&mask {
				sh.slots[i] = *v
				i = j
				break
			}
		}
	}
}

// shrink makes the table and the map of held keys again when they hold a
// quarter of the keys they once held, or fewer (a table at most half
// full): neither a table nor a Go map gives back the room it grew to on
// its own, and the keys of a burst must not hold memory for ever.
// Requires sh.mu.
func (sh *shard[S]) shrink() {
	if sh.peak < 64 || (sh.n+len(sh.held))*4 > sh.peak {
		return
	}
	size := minSlots
	for size < 2*sh.n {
		size *= 2
	}
	if size < len(sh.slots) {
		sh.resize(size)
	}
	if len(sh.held) > 0 {
		m := make(map[string]*held[S], len(sh.held))
		for k, h := range sh.held {
			m[k] = h
		}
		sh.held = m
	} else {
		sh.held = nil
	}
	sh.peak = sh.n + len(sh.held)
}
