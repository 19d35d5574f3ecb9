package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

// memoryOf builds memory partitions of cfg on clock.
func memoryOf(cfg ratelimit.Config, clock ratelimit.Clock) func(string) (ratelimit.Limiter, error) {
	return func(string) (ratelimit.Limiter, error) { return memory.New(cfg, memory.WithClock(clock)) }
}

// recordingOf is memoryOf that keeps each partition's limiter in seen, so a
// test can tell when a waiter is queued in it.
func recordingOf(cfg ratelimit.Config, clock ratelimit.Clock, seen *sync.Map) func(string) (ratelimit.Limiter, error) {
	return func(key string) (ratelimit.Limiter, error) {
		l, err := memory.New(cfg, memory.WithClock(clock))
		if err == nil {
			seen.Store(key, l)
		}
		return l, err
	}
}

// waitQueued returns once a waiter is queued in key's partition.
func waitQueued(t *testing.T, seen *sync.Map, key string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		if l, ok := seen.Load(key); ok && l.(memory.Limiter).Stats().Queued > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter queued in partition %q within 5s", key)
		}
	}
}

func newPartitioned(t *testing.T, c partitioned.Config) *partitioned.Limiter {
	t.Helper()
	l, err := partitioned.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func identity(s string) string { return s }

// TestEvictionIsLossless: with a sweeper far more eager than any real one,
// the partitioned limiter decides exactly as limiters that are never evicted.
func TestEvictionIsLossless(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 20, Burst: 5}
	p := newPartitioned(t, partitioned.Config{New: memoryOf(cfg, clock), IdleTimeout: 50 * time.Millisecond, Clock: clock})
	reference := map[string]memory.Limiter{}
	rng := rand.New(rand.NewSource(3))
	keys := []string{"a", "b", "c"}
	for i := 0; i < 5000; i++ {
		clock.Advance(time.Duration(rng.Int63n(int64(400 * time.Millisecond)))) // sweeps run in between
		k := keys[rng.Intn(len(keys))]
		if reference[k] == nil {
			reference[k], _ = memory.New(cfg, memory.WithClock(clock))
			defer reference[k].Close()
		}
		n := 1 + rng.Intn(5)
		got, err1 := p.Acquire(bg, k, n)
		want, err2 := reference[k].Acquire(bg, n)
		if err1 != nil || err2 != nil || got.Acquired() != want.Acquired() || got.Remaining() != want.Remaining() {
			t.Fatalf("step %d key %s n %d: partitioned %v %v, reference %v %v", i, k, n, got, err1, want, err2)
		}
	}
	s := p.Stats()
	if s.Evicted < 100 || s.Created != s.Evicted+s.Live {
		t.Fatalf("stats %+v: want many evictions (the test must exercise them) and created = evicted + live", s)
	}
}

// TestSweepEvictsEveryIdlePartition: one sweep evicts every partition idle
// for IdleTimeout, and none before, however many share a shard.
func TestSweepEvictsEveryIdlePartition(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := tokenbucket.Config{Rate: 1000, Burst: 1} // full again, so idle, 1ms after a grant
	p := newPartitioned(t, partitioned.Config{New: memoryOf(cfg, clock), IdleTimeout: time.Second, Clock: clock})
	const keys = 5000
	for i := 0; i < keys; i++ {
		if l, err := p.Acquire(bg, fmt.Sprint("user-", i), 1); err != nil || !l.Acquired() {
			t.Fatal(l, err)
		}
	}
	clock.Advance(1100 * time.Millisecond) // sweeps every 250ms; the last, at 1s, finds them idle for 999ms
	if s := p.Stats(); s.Live != keys || s.Evicted != 0 {
		t.Fatalf("before IdleTimeout: %+v, want all %d alive", s, keys)
	}
	clock.Advance(200 * time.Millisecond) // one sweep, at 1.25s
	if s := p.Stats(); s.Live != 0 || s.Evicted != keys {
		t.Fatalf("after one sweep past IdleTimeout: %+v, want all %d evicted", s, keys)
	}
	for i := 0; i < keys; i += 7 { // recreated in their initial state
		if l, _ := p.Acquire(bg, fmt.Sprint("user-", i), 1); !l.Acquired() {
			t.Fatalf("user-%d after eviction: %v", i, l)
		}
	}
}

// TestActivePartitionsStay: a partition with a permit held or a waiter is
// never evicted, however long it stays so.
func TestActivePartitionsStay(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}
	var seen sync.Map
	p := newPartitioned(t, partitioned.Config{New: recordingOf(cfg, clock, &seen), IdleTimeout: time.Second, Clock: clock})
	held, _ := p.Acquire(bg, "held", 1)
	p.Acquire(bg, "w", 1)
	waited := make(chan ratelimit.Lease, 1)
	ctx, cancel := context.WithCancel(bg)
	go func() { l, _ := p.Wait(ctx, "w", 1); waited <- l }()
	waitQueued(t, &seen, "w")
	clock.Advance(time.Hour)
	if s := p.Stats(); s.Live != 2 || s.Evicted != 0 {
		t.Fatalf("after an hour: %+v, want both partitions alive", s)
	}
	cancel()
	<-waited
	held.Release()
	clock.Advance(2 * time.Second)
	if s := p.Stats(); s.Evicted != 1 || s.Live != 1 {
		t.Fatalf("after release: %+v, want the released partition evicted, the other still holding a permit", s)
	}
}

// TestFloodIsBounded: 250,000 distinct keys (5,000 new ones per window, 25
// times MaxPartitions in all) keep the live partitions under MaxPartitions
// and the heap bounded, while nearly every key is served. The live
// partitions take about 4 MiB; the 16 MiB bound fails a leak of 50 bytes
// per key created.
func TestFloodIsBounded(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := fixedwindow.Config{Limit: 1, Window: 100 * time.Millisecond}
	const max, keys = 10_000, 250_000
	p := newPartitioned(t, partitioned.Config{New: memoryOf(cfg, clock),
		IdleTimeout: 100 * time.Millisecond, MaxPartitions: max, Clock: clock})
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := 0; i < keys; i++ {
		clock.Advance(20 * time.Microsecond)
		if _, err := p.Acquire(bg, fmt.Sprintf("ip-%d", i), 1); err != nil {
			t.Fatal(err)
		}
		if i%25_000 == 0 && p.Stats().Live > max {
			t.Fatalf("after %d keys: %+v", i, p.Stats())
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	s := p.Stats()
	grown := int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc)
	t.Logf("%d keys: %+v, heap grew %d KiB", keys, s, grown/1024)
	if s.Live > max || s.Created+s.Refused != keys || s.Created < keys*99/100 {
		t.Fatalf("stats %+v: want live <= %d and nearly every key served", s, max)
	}
	if grown > 16<<20 {
		t.Fatalf("heap grew by %d MiB for %d live partitions", grown>>20, s.Live)
	}
}

// ownKey is a partition's limiter that knows its key, and fails a call
// that the context says is meant for another key.
type ownKey struct {
	memory.Limiter
	key string
}

type keyOfCall struct{}

func (o ownKey) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if k := ctx.Value(keyOfCall{}); k != o.key {
		return ratelimit.Lease{}, fmt.Errorf("a call for %v reached the partition of %q", k, o.key)
	}
	return o.Limiter.Acquire(ctx, permits)
}

// TestChurnUnderConcurrency: goroutines take and release one permit of
// 256 keys' concurrency limits while at most 32 partitions may live, so
// partitions are evicted (by the bound, and by sweeps that run
// concurrently) and their places reused all the time. Every call reaches
// its own key's partition, and no key is ever held twice.
func TestChurnUnderConcurrency(t *testing.T) {
	clock := ratelimittest.NewClock()
	p := newPartitioned(t, partitioned.Config{MaxPartitions: 32, IdleTimeout: time.Millisecond, Clock: clock,
		New: func(key string) (ratelimit.Limiter, error) {
			l, err := memory.New(concurrency.Config{Limit: 1}, memory.WithClock(clock))
			return ownKey{l, key}, err
		}})
	var holders [256]atomic.Int32
	var granted atomic.Int64
	done := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Add(1)
	go func() { // sweeps, concurrently with the calls
		defer sweeps.Done()
		for {
			select {
			case <-done:
				return
			default:
				clock.Advance(time.Millisecond)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < 5000; i++ {
				k := rng.Intn(len(holders))
				key := fmt.Sprint("k", k)
				l, err := p.Acquire(context.WithValue(bg, keyOfCall{}, key), key, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !l.Acquired() {
					continue
				}
				granted.Add(1)
				if n := holders[k].Add(1); n != 1 {
					t.Errorf("%s held %d times at once", key, n)
				}
				holders[k].Add(-1)
				l.Release()
			}
		}(g)
	}
	wg.Wait()
	close(done)
	sweeps.Wait()
	s := p.Stats()
	if s.Live > 32 || s.Evicted < 1000 || granted.Load() < 20_000 || s.Refused > 1000 {
		t.Fatalf("%+v, %d granted: want at most 32 alive, many evictions, most calls granted and few refused", s, granted.Load())
	}
}

func TestConcurrentFirstUseCreatesOnePartition(t *testing.T) {
	clock := ratelimittest.NewClock()
	p := newPartitioned(t, partitioned.Config{New: memoryOf(fixedwindow.Config{Limit: 100, Window: time.Hour}, clock), Clock: clock})
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p.Acquire(bg, "new", 1)
		}()
	}
	close(start)
	wg.Wait()
	if s := p.Stats(); s.Created != 1 || s.Live != 1 {
		t.Fatalf("%+v, want exactly one partition", s)
	}
	if l, _ := p.Acquire(bg, "new", 68); !l.Acquired() || l.Remaining() != 0 {
		t.Fatalf("after 32 grants: %v, want the last 68 permits granted (no grant lost to a discarded partition)", l)
	}
}

func TestCloseWithWaiters(t *testing.T) {
	clock := ratelimittest.NewClock()
	var seen sync.Map
	p, _ := partitioned.New(partitioned.Config{New: recordingOf(concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, clock, &seen), Clock: clock})
	p.Acquire(bg, "k", 1)
	done := make(chan ratelimit.Lease, 1)
	go func() { l, _ := p.Wait(bg, "k", 1); done <- l }()
	waitQueued(t, &seen, "k")
	p.Close()
	if l := <-done; l.Reason() != ratelimit.ReasonClosed {
		t.Fatalf("waiter at Close: %v, want ReasonClosed", l)
	}
	if _, err := p.Acquire(bg, "k", 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseDuringCalls: Close while goroutines call on new and existing
// keys; every call is answered, with a lease or ErrClosed, and after Close
// only ErrClosed.
func TestCloseDuringCalls(t *testing.T) {
	clock := ratelimittest.NewClock()
	p, _ := partitioned.New(partitioned.Config{New: memoryOf(fixedwindow.Config{Limit: 1 << 20, Window: time.Hour}, clock), Clock: clock})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := p.Acquire(bg, fmt.Sprint(i%50+g), 1)
				calls.Add(1)
				if errors.Is(err, ratelimit.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	for calls.Load() < 2000 && !t.Failed() {
		runtime.Gosched()
	}
	p.Close()
	wg.Wait()
	if _, err := p.Acquire(bg, "1", 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

func TestMaxPartitionsRefuseOrOverflow(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := fixedwindow.Config{Limit: 5, Window: time.Hour}
	p := newPartitioned(t, partitioned.Config{New: memoryOf(cfg, clock), MaxPartitions: 2, Clock: clock})
	p.Acquire(bg, "a", 1)
	p.Acquire(bg, "b", 1)
	if l, err := p.Acquire(bg, "c", 1); err != nil || l.Reason() != ratelimit.ReasonNoPartition {
		t.Fatalf("third key with two busy partitions: %v %v, want ReasonNoPartition", l, err)
	}
	if s := p.Stats(); s.Refused != 1 || s.Live != 2 {
		t.Fatalf("%+v", s)
	}
	overflow, _ := memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour}, memory.WithClock(clock))
	defer overflow.Close()
	o := newPartitioned(t, partitioned.Config{New: memoryOf(cfg, clock), MaxPartitions: 1, Overflow: overflow, Clock: clock})
	o.Acquire(bg, "a", 1)
	if l, _ := o.Acquire(bg, "b", 1); !l.Acquired() {
		t.Fatalf("overflow: %v, want granted by the overflow limiter", l)
	}
	if l, _ := o.Acquire(bg, "c", 1); l.Acquired() {
		t.Fatalf("overflow: %v, want refused: the overflow limiter is shared and spent", l)
	}
	// An idle partition makes room at once, without waiting for the sweeper.
	clock.Advance(time.Hour)
	if l, _ := p.Acquire(bg, "c", 1); !l.Acquired() {
		t.Fatalf("with idle partitions: %v, want c created in an idle one's place", l)
	}
}

// TestBoundEvictsIdleInAnyShard: at MaxPartitions, a new key takes the
// place of an idle partition wherever its key hashed to, before any sweep.
func TestBoundEvictsIdleInAnyShard(t *testing.T) {
	clock := ratelimittest.NewClock()
	cfg := fixedwindow.Config{Limit: 1, Window: time.Second}
	p := newPartitioned(t, partitioned.Config{New: memoryOf(cfg, clock), MaxPartitions: 8, IdleTimeout: time.Hour, Clock: clock})
	for i := 0; i < 8; i++ {
		p.Acquire(bg, fmt.Sprint("old-", i), 1)
	}
	if l, _ := p.Acquire(bg, "new-0", 1); l.Reason() != ratelimit.ReasonNoPartition {
		t.Fatalf("at the bound with every partition busy: %v, want ReasonNoPartition", l)
	}
	clock.Advance(2 * time.Second) // every window over: all idle; the first sweep is at 15 minutes
	for i := 0; i < 8; i++ {
		if l, _ := p.Acquire(bg, fmt.Sprint("new-", i), 1); !l.Acquired() {
			t.Fatalf("new-%d with idle partitions: %v, want it served in an idle one's place", i, l)
		}
	}
	if s := p.Stats(); s.Live != 8 || s.Evicted != 8 || s.Refused != 1 {
		t.Fatalf("%+v, want 8 alive, 8 evicted, 1 refused", s)
	}
}

// TestBoundIsExactUnderConcurrency: 64 new keys at once, each holding its
// permit, against MaxPartitions 8: exactly 8 are served.
func TestBoundIsExactUnderConcurrency(t *testing.T) {
	for round := 0; round < 20; round++ {
		clock := ratelimittest.NewClock()
		p := newPartitioned(t, partitioned.Config{New: memoryOf(concurrency.Config{Limit: 1}, clock), MaxPartitions: 8, Clock: clock})
		var wg sync.WaitGroup
		var served atomic.Int32
		start := make(chan struct{})
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if l, _ := p.Acquire(bg, fmt.Sprint("key-", g), 1); l.Acquired() {
					served.Add(1) // held until the end: never idle
				}
			}()
		}
		close(start)
		wg.Wait()
		if s := p.Stats(); served.Load() != 8 || s.Live != 8 || s.Refused != 56 {
			t.Fatalf("round %d: %d served, %+v; want exactly 8 served and alive, 56 refused", round, served.Load(), s)
		}
	}
}

func TestPerUserAndGlobal(t *testing.T) {
	clock := ratelimittest.NewClock()
	perUser := newPartitioned(t, partitioned.Config{New: memoryOf(fixedwindow.Config{Limit: 2, Window: time.Hour}, clock), Clock: clock})
	global, _ := memory.New(fixedwindow.Config{Limit: 3, Window: time.Hour}, memory.WithClock(clock))
	defer global.Close()
	take := func(user string) bool {
		l, err := ratelimit.Chain(perUser.For(user), global).Acquire(bg, 1)
		if err != nil {
			t.Fatal(err)
		}
		return l.Acquired()
	}
	got := []bool{take("u1"), take("u1"), take("u1"), take("u2"), take("u3")}
	want := []bool{true, true, false, true, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grants %v, want %v (2 per user, 3 in all)", got, want)
	}
}

func TestNoLimitAndFactoryErrors(t *testing.T) {
	clock := ratelimittest.NewClock()
	boom := errors.New("boom")
	p := newPartitioned(t, partitioned.Config{Clock: clock, New: func(k string) (ratelimit.Limiter, error) {
		switch k {
		case "admin":
			return partitioned.NoLimit(), nil
		case "bad":
			return nil, boom
		}
		return memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour}, memory.WithClock(clock))
	}})
	for i := 0; i < 100; i++ {
		if l, _ := p.Acquire(bg, "admin", 1000); !l.Acquired() {
			t.Fatal("NoLimit refused")
		}
	}
	if _, err := p.Acquire(bg, "bad", 1); !errors.Is(err, partitioned.ErrNoPartition) || !errors.Is(err, boom) {
		t.Fatalf("factory error: %v", err)
	}
	newLimiter := memoryOf(fixedwindow.Config{Limit: 1, Window: time.Hour}, clock)
	for _, c := range []struct {
		cfg   partitioned.Config
		names string // the field the error names (and no other)
	}{
		{partitioned.Config{}, "New"},
		{partitioned.Config{New: newLimiter, IdleTimeout: -1}, "IdleTimeout"},
		{partitioned.Config{New: newLimiter, MaxPartitions: -1}, "MaxPartitions"},
		{partitioned.Config{New: newLimiter, MaxPartitions: int(int64(math.MaxInt32) + 1)}, "MaxPartitions"},
	} {
		l, err := partitioned.New(c.cfg)
		if !errors.Is(err, ratelimit.ErrInvalidConfig) || l != nil {
			t.Fatalf("New(IdleTimeout %v, MaxPartitions %d): %v, want ErrInvalidConfig", c.cfg.IdleTimeout, c.cfg.MaxPartitions, err)
		}
		for _, field := range []string{"IdleTimeout", "MaxPartitions"} {
			if strings.Contains(err.Error(), field) != strings.Contains(c.names, field) {
				t.Errorf("%v: names the fields %q, want %q", err, field, c.names)
			}
		}
	}
	l, err := partitioned.New(partitioned.Config{New: newLimiter, MaxPartitions: math.MaxInt32})
	if err != nil {
		t.Fatalf("MaxPartitions MaxInt32: %v", err)
	}
	l.Close()
}

// TestRedisPartitions: over the redis backend a partition is a thin handle;
// evicting it keeps the state, which lives in Redis.
func TestRedisPartitions(t *testing.T) {
	m := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
	defer c.Close()
	clock := ratelimittest.NewClock()
	p := newPartitioned(t, partitioned.Config{IdleTimeout: time.Second, Clock: clock,
		New: func(k string) (ratelimit.Limiter, error) {
			return redis.New(c, k, fixedwindow.Config{Limit: 2, Window: time.Hour}, redis.WithClock(clock))
		}})
	p.Acquire(bg, "user", 1)
	clock.Advance(2 * time.Second)
	if s := p.Stats(); s.Evicted != 1 {
		t.Fatalf("%+v, want the unused handle evicted", s)
	}
	if l, _ := p.Acquire(bg, "user", 2); l.Acquired() || l.Remaining() != 1 {
		t.Fatalf("after eviction: %v, want the window's state kept in Redis (1 left)", l)
	}
}

// BenchmarkCreatePartition: allocations to create a partition on first use
// (the key string is the resource itself here, so it is not counted).
func BenchmarkCreatePartition(b *testing.B) {
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	f, _ := memory.NewFactory(tokenbucket.Config{Rate: 10, Burst: 10})
	p, _ := partitioned.New(partitioned.Config{MaxPartitions: b.N + 1, New: f.ForKey})
	defer p.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Acquire(bg, keys[i], 1)
	}
}

// BenchmarkCreatePartitionChurn: creating partitions while idle ones are
// evicted, as under a flood of new clients: the evicted slots are reused.
func BenchmarkCreatePartitionChurn(b *testing.B) {
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	f, _ := memory.NewFactory(tokenbucket.Config{Rate: 1e9, Burst: 10})
	p, _ := partitioned.New(partitioned.Config{MaxPartitions: 1000, New: f.ForKey})
	defer p.Close()
	for i := 0; i < 2000; i++ { // fill to the bound
		p.Acquire(bg, fmt.Sprint(i), 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Acquire(bg, keys[i], 1) // refilled within a microsecond: idle, so evictable for the next key
	}
}

// TestLiveNeverExceedsMax: under a flood of new keys at the bound, where
// every creation evicts an idle partition, Stats never reads more than
// MaxPartitions live, not even for a moment.
func TestLiveNeverExceedsMax(t *testing.T) {
	f, _ := memory.NewFactory(tokenbucket.Config{Rate: 1e9, Burst: 10}) // full again within a microsecond: idle
	const max = 4
	p := newPartitioned(t, partitioned.Config{MaxPartitions: max, New: f.ForKey})
	stop := make(chan struct{})
	var worst atomic.Int64
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := p.Stats().Live; n > worst.Load() {
				worst.Store(n)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20_000 && worst.Load() <= max; i++ {
				if _, err := p.Acquire(bg, fmt.Sprint(g, "-", i), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	watching.Wait()
	if w := worst.Load(); w > max {
		t.Fatalf("Stats().Live read %d, over MaxPartitions %d (%+v)", w, max, p.Stats())
	}
	if s := p.Stats(); s.Evicted < 1000 {
		t.Fatalf("%+v: want many evictions at the bound (the test must exercise them)", s)
	}
}

// TestInvalidCallsTouchNoPartition: negative permits and a nil or done ctx
// are reported as such before any partition is looked up or created, also
// at the bound, where a valid call for a new key would be refused.
func TestInvalidCallsTouchNoPartition(t *testing.T) {
	clock := ratelimittest.NewClock()
	p := newPartitioned(t, partitioned.Config{New: memoryOf(concurrency.Config{Limit: 1}, clock), MaxPartitions: 2, Clock: clock})
	p.Acquire(bg, "a", 1) // held: "a" stays busy
	done, cancel := context.WithCancel(bg)
	cancel()
	for _, call := range []struct {
		name string
		f    func(context.Context, string, int) (ratelimit.Lease, error)
	}{{"Acquire", p.Acquire}, {"Wait", p.Wait}} {
		for _, key := range []string{"a", "new"} { // an existing partition, and room for one more
			if _, err := call.f(bg, key, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
				t.Errorf("%s(%q, -1): %v, want ErrInvalidPermits", call.name, key, err)
			}
			if _, err := call.f(nil, key, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck // a nil ctx on purpose
				t.Errorf("%s(nil ctx, %q): %v, want ErrNilContext", call.name, key, err)
			}
			if _, err := call.f(done, key, 1); !errors.Is(err, context.Canceled) {
				t.Errorf("%s(done ctx, %q): %v, want context.Canceled", call.name, key, err)
			}
		}
	}
	if s := p.Stats(); s.Created != 1 || s.Live != 1 {
		t.Fatalf("%+v: the invalid calls created partitions", s)
	}
	p.Acquire(bg, "b", 1) // at the bound, every partition busy
	for _, call := range []func(context.Context, string, int) (ratelimit.Lease, error){p.Acquire, p.Wait} {
		if l, err := call(bg, "new", -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
			t.Errorf("at the bound, (new, -1): %v, %v; want ErrInvalidPermits", l, err)
		}
		if l, err := call(nil, "new", 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck // a nil ctx on purpose
			t.Errorf("at the bound, nil ctx: %v, %v; want ErrNilContext", l, err)
		}
	}
	if s := p.Stats(); s.Refused != 0 || s.Live != 2 {
		t.Fatalf("%+v: invalid calls were counted as refusals", s)
	}
}

// failingClose is a memory limiter whose Close also returns err.
type failingClose struct {
	memory.Limiter
	err error
}

func (f failingClose) Close() error {
	f.Limiter.Close()
	return f.err
}

// TestCloseErrors: Close returns the partitions' Close errors, joined and
// naming their keys; the errors of limiters closed on eviction (by the
// sweeper or to make room) or discarded unused go to OnCloseError.
func TestCloseErrors(t *testing.T) {
	clock := ratelimittest.NewClock()
	boom := errors.New("boom")
	var mu sync.Mutex
	reported := map[string]error{}
	newFailing := func(key string) (ratelimit.Limiter, error) {
		l, err := memory.New(fixedwindow.Config{Limit: 1, Window: time.Second}, memory.WithClock(clock))
		return failingClose{l, fmt.Errorf("%s: %w", key, boom)}, err
	}
	p, err := partitioned.New(partitioned.Config{New: newFailing, MaxPartitions: 2, IdleTimeout: time.Minute, Clock: clock,
		OnCloseError: func(key string, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported[key] = err
		}})
	if err != nil {
		t.Fatal(err)
	}
	p.Acquire(bg, "a", 1)
	p.Acquire(bg, "b", 1)
	p.Acquire(bg, "refused", 1) // at the bound, both busy: its limiter is discarded
	clock.Advance(2 * time.Second)
	p.Acquire(bg, "c", 1) // evicts a or b to make room
	clock.Advance(2 * time.Minute)
	if s := p.Stats(); s.Evicted != 3 || s.Live != 0 {
		t.Fatalf("%+v, want every partition evicted", s)
	}
	p.Acquire(bg, "d", 1)
	mu.Lock()
	if len(reported) != 4 || !errors.Is(reported["refused"], boom) || !errors.Is(reported["c"], boom) {
		t.Errorf("OnCloseError got %v; want the errors of refused, a, b and c", reported)
	}
	mu.Unlock()
	err = p.Close()
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"d"`) {
		t.Fatalf("Close: %v, want d's error, naming d", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestFactoryNilLimiter: a factory returning (nil, nil) is an error naming
// the key, and creates no partition.
func TestFactoryNilLimiter(t *testing.T) {
	var typedNil *failingClose
	p := newPartitioned(t, partitioned.Config{New: func(key string) (ratelimit.Limiter, error) {
		if key == "typed" {
			return typedNil, nil
		}
		return nil, nil
	}})
	for _, key := range []string{"k", "typed"} {
		for _, call := range []func(context.Context, string, int) (ratelimit.Lease, error){p.Acquire, p.Wait} {
			_, err := call(bg, key, 1)
			if !errors.Is(err, partitioned.ErrNoPartition) || !errors.Is(err, ratelimit.ErrInvalidConfig) || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
				t.Fatalf("factory returning a nil limiter for %q: %v; want ErrNoPartition and ErrInvalidConfig, naming the key", key, err)
			}
		}
	}
	if s := p.Stats(); s.Created != 0 || s.Live != 0 {
		t.Fatalf("%+v, want no partition", s)
	}
}

// TestZeroAndNilLimiter: a Limiter not made by New answers
// ErrInvalidConfig instead of panicking; Stats and Close of a nil one are
// empty; a typed nil Overflow is refused by New; NoLimit checks its ctx.
func TestZeroAndNilLimiter(t *testing.T) {
	var zero partitioned.Limiter
	var nilLimiter *partitioned.Limiter
	for _, l := range []*partitioned.Limiter{&zero, nilLimiter} {
		if _, err := l.Acquire(bg, "k", 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("Acquire: %v, want ErrInvalidConfig", err)
		}
		if _, err := l.For("k").Wait(bg, 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Errorf("Wait: %v, want ErrInvalidConfig", err)
		}
		if s := l.Stats(); s != (partitioned.Stats{}) {
			t.Errorf("Stats: %+v", s)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	var overflow *failingClose
	if _, err := partitioned.New(partitioned.Config{New: func(string) (ratelimit.Limiter, error) { return partitioned.NoLimit(), nil }, Overflow: overflow}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Errorf("New with a typed nil Overflow: %v, want ErrInvalidConfig", err)
	}
	//lint:ignore SA1012 a nil context is the input under test
	if _, err := partitioned.NoLimit().Acquire(nil, 1); !errors.Is(err, ratelimit.ErrNilContext) {
		t.Errorf("NoLimit with a nil ctx: %v, want ErrNilContext", err)
	}
}

// gate is a limiter that always reports itself idle, as a memory limiter
// does between a call's lookup of its partition and the call's decision.
// Its first call passes; later ones (Acquire or Refund) stay inside until
// open is closed.
type gate struct {
	calls   atomic.Int32
	entered chan struct{}
	open    chan struct{}
	closed  atomic.Bool
}

func (g *gate) pass() error {
	if g.calls.Add(1) > 1 {
		g.entered <- struct{}{}
		<-g.open
	}
	if g.closed.Load() {
		return ratelimit.ErrClosed
	}
	return nil
}

func (g *gate) Acquire(context.Context, int) (ratelimit.Lease, error) {
	return ratelimit.Lease{}, g.pass()
}

func (g *gate) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return g.Acquire(ctx, permits)
}

func (g *gate) Refund(context.Context, ratelimit.Lease, int) error { return g.pass() }

func (g *gate) IdleFor() (time.Duration, bool) { return time.Hour, true }

func (g *gate) Close() error { g.closed.Store(true); return nil }

// TestCallInFlightKeepsPartition: a partition whose limiter is idle, but
// with a call in flight (an Acquire, or a Refund), is evicted neither by
// the sweeper nor to make room, so the call never finds its limiter
// closed; once the call has returned, it is.
func TestCallInFlightKeepsPartition(t *testing.T) {
	for _, call := range []string{"Acquire", "Refund"} {
		t.Run(call, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			var mu sync.Mutex
			gates := map[string]*gate{}
			p := newPartitioned(t, partitioned.Config{MaxPartitions: 1, IdleTimeout: time.Second, Clock: clock,
				New: func(key string) (ratelimit.Limiter, error) {
					g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
					mu.Lock()
					defer mu.Unlock()
					gates[key] = g
					return g, nil
				}})
			if _, err := p.Acquire(bg, "a", 1); err != nil { // creates a's partition
				t.Fatal(err)
			}
			mu.Lock()
			a := gates["a"]
			mu.Unlock()
			returned := make(chan error, 1)
			go func() {
				if call == "Acquire" {
					_, err := p.Acquire(bg, "a", 1)
					returned <- err
				} else {
					returned <- p.Refund(bg, "a", ratelimit.Lease{}, 1)
				}
			}()
			<-a.entered
			clock.Advance(time.Hour) // sweeps
			if l, err := p.Acquire(bg, "b", 1); err != nil || l.Reason() != ratelimit.ReasonNoPartition {
				t.Fatalf("b at MaxPartitions while a call is in a: %v, %v; want ReasonNoPartition", l, err)
			}
			if s := p.Stats(); s.Live != 1 || s.Evicted != 0 || a.closed.Load() {
				t.Fatalf("with a call in a's partition: %+v, a closed %v; want a alive and open", s, a.closed.Load())
			}
			close(a.open)
			if err := <-returned; err != nil {
				t.Fatalf("%s on a: %v", call, err)
			}
			if l, err := p.Acquire(bg, "b", 1); err != nil || l.Reason() == ratelimit.ReasonNoPartition {
				t.Fatalf("b once a's call returned: %v, %v; want b in a's place", l, err)
			}
			if s := p.Stats(); s.Live != 1 || s.Evicted != 1 || !a.closed.Load() {
				t.Fatalf("after b took a's place: %+v, a closed %v; want a evicted and closed", s, a.closed.Load())
			}
		})
	}
}

// The sweeper, on the real clock, re-arms itself while New is returning:
// New's start of it and the sweeper's own writes are ordered (the race
// detector checks it), and Close stops whichever timer is armed.
func TestSweeperStartsWithoutRace(t *testing.T) {
	f, err := memory.NewFactory(fixedwindow.Config{Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p, err := partitioned.New(partitioned.Config{New: f.ForKey, IdleTimeout: 4 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // a sweep every millisecond
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
