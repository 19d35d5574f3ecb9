package partitioned

import (
	"sync"
	"sync/atomic"

	"github.com/limitkit/ratelimit"
)

// The partitions live in a store of fixed-size chunks that never move, so a
// call can hold one (counted in flight) without a lock; an id numbers each
// place. Each shard indexes its partitions by key in an open-addressing
// table of 8-byte slots (linear probing), where a Go map's slot would take
// 25 bytes: a lookup reads one slot of a small table, then the partition
// it names. BenchmarkIndex (table_test.go) is what keeps it: against a Go
// map per shard of records, on 1,000,000 keys, the table and its records
// take about 59 bytes per key where the map and its records take 104, and
// lookups in creation order take half the time (in random order, the
// same). BenchmarkPartitioned (bench/peers_test.go) measures the whole
// path, limiters included, against sethvargo/go-limiter.

// partition is the limiter of one key, and the calls that hold it.
type partition struct {
	key      string
	limiter  ratelimit.Limiter
	inflight atomic.Int32 // calls that hold this partition; raised under the shard's read lock
}

// done ends a call that get counted in flight; nothing for no partition.
func (p *partition) done() {
	if p != nil {
		p.inflight.Add(-1)
	}
}

const chunk = 64 // partitions per chunk of the store

// store hands out the places of partitions; evicted places are reused.
type store struct {
	chunks atomic.Pointer[[]*[chunk]partition] // grows by appending: a reader's copy stays valid

	mu   sync.Mutex // guards free and n, and the growth of chunks
	free []uint32   // places of evicted partitions: nobody holds them (evicted with nothing in flight)
	n    uint32     // places handed out so far
}

func (st *store) at(id uint32) *partition { return &(*st.chunks.Load())[id/chunk][id%chunk] }

// alloc returns a free place.
func (st *store) alloc() uint32 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := len(st.free); n > 0 {
		id := st.free[n-1]
		st.free = st.free[:n-1]
		return id
	}
	id := st.n
	if id%chunk == 0 {
		var c []*[chunk]partition
		if p := st.chunks.Load(); p != nil {
			c = *p
		}
		// Appending writes past the length every reader sees.
		c = append(c, new([chunk]partition))
		st.chunks.Store(&c)
	}
	st.n++
	return id
}

// release makes id's place free again.
func (st *store) release(id uint32) {
	st.mu.Lock()
	st.free = append(st.free, id)
	st.mu.Unlock()
}

// shard indexes the partitions whose keys hash to it. A slot holds the low
// 32 bits of the key's hash (which pick its home slot) and id+1; 0 is an
// empty slot. At most three quarters of the slots are used, so a probe
// always ends.
type shard struct {
	mu    sync.RWMutex
	slots []uint64
	n     int // slots used
}

const minSlots = 8

// find returns the partition of key, whose hash is h, and its slot; when
// key has none, p is nil and i is the empty slot where it would go.
// Requires s.mu (read or write).
func (s *shard) find(st *store, key string, h uint32) (i int, p *partition) {
	mask := len(s.slots) - 1
	for i = int(h) & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return i, nil
		}
		if uint32(v>>32) == h {
			if p = st.at(uint32(v) - 1); p.key == key {
				return i, p
			}
		}
	}
}

// insert puts id in the empty slot i that find returned for hash h, and
// grows the table when it is three quarters full. Requires s.mu.
func (s *shard) insert(i int, h, id uint32) {
	s.slots[i] = uint64(h)<<32 | uint64(id+1)
	if s.n++; s.n*4 >= len(s.slots)*3 {
		old := s.slots
		s.slots = make([]uint64, 2*len(old))
		for _, v := range old {
			if v != 0 {
				s.place(v)
			}
		}
	}
}

// place puts v in the first empty slot from its home. Requires s.mu.
func (s *shard) place(v uint64) {
	mask := len(s.slots) - 1
	i := int(v>>32) & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = v
}

// remove empties slot i, moving back the slots after it that would no
// longer be found (backward-shift deletion: no tombstones). The slots that
// move land at i or after it, never before. Requires s.mu.
func (s *shard) remove(i int) {
	mask := len(s.slots) - 1
	s.n--
	for j := i; ; {
		s.slots[i] = 0
		for {
			j = (j + 1) & mask
			v := s.slots[j]
			if v == 0 {
				return
			}
			// v may fill the hole at i unless its home lies in (i, j], cyclically.
			if home := int(v>>32) & mask; (home-i-1)&mask >= (j-i)&mask {
				s.slots[i] = v
				i = j
				break
			}
		}
	}
}
