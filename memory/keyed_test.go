package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
	"github.com/limitkit/ratelimit/waittrace"
)

func newKeyed(t testing.TB, cfg ratelimit.Config, opts ...memory.Option) *memory.Keyed {
	t.Helper()
	k, err := memory.NewKeyed(cfg, opts...)
	if err != nil {
		t.Fatalf("memory.NewKeyed(%#v): %v", cfg, err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// keyedFactory makes the limiter under test the view of one key of a
// Keyed whose other keys are busy: a sibling key has taken all its
// permits, so that keys share no state.
func keyedFactory(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
	k := newKeyed(t, cfg, clockOpt(clock)...)
	if lease, _ := k.Acquire(bg, "sibling", int(cfg.Capacity())); !lease.Acquired() {
		t.Fatalf("a new key refused its capacity: %v", lease)
	}
	return k.For("key")
}

func TestKeyedConformance(t *testing.T) { conformance.Run(t, keyedFactory) }

// TestKeyedExtremes: the fake clock advances by up to a century there,
// running every sweep due meanwhile, so the sweeper runs every 73 years
// (the longest idle timeout).
func TestKeyedExtremes(t *testing.T) {
	conformance.RunExtremes(t, func(t testing.TB, cfg ratelimit.Config, clock *ratelimittest.Clock) ratelimit.Limiter {
		return newKeyed(t, cfg, memory.WithClock(clock), memory.WithIdleTimeout(math.MaxInt64)).For("key")
	})
}

// TestKeyedContract runs the kit's contract checks, on the real clock,
// against the limiter of one key of a Keyed: a token bucket (its states
// in the table, its Waits reserving in a limiter of the key's) and a
// concurrency limit (held by a limiter from the start). TestContract runs
// them against every algorithm's limiter, whose decisions
// TestKeyedDecidesAsALimiterPerKey finds the Keyed's to be.
func TestKeyedContract(t *testing.T) {
	for _, a := range conformance.Algorithms() {
		if a.Name != "tokenbucket" && a.Name != "concurrency" {
			continue
		}
		t.Run(a.Name, func(t *testing.T) {
			t.Parallel()
			err := ratelimittest.TestLimiter(func(c int64) ratelimit.Limiter {
				return newKeyed(t, a.Config(int(c), ratelimit.Queue{Limit: int(c)})).For("10.0.0.1")
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Bad arguments are errors naming the value, and change nothing: no key
// is added, no state moves.
func TestKeyedErrorsChangeNothing(t *testing.T) {
	for _, c := range []struct {
		cfg  ratelimit.Config
		opts []memory.Option
		want string
	}{
		{nil, nil, "nil"},
		{fixedwindow.Config{Limit: 0, Window: time.Second}, nil, "Limit"},
		{fixedwindow.Config{Limit: 1, Window: time.Second}, []memory.Option{memory.WithIdleTimeout(-time.Second)}, "-1s"},
		{fixedwindow.Config{Limit: 1, Window: time.Second}, []memory.Option{memory.WithMaxKeys(-3)}, "-3"},
	} {
		if _, err := memory.NewKeyed(c.cfg, c.opts...); !errors.Is(err, ratelimit.ErrInvalidConfig) || !contains(err, c.want) {
			t.Errorf("NewKeyed(%#v): %v, want ErrInvalidConfig naming %s", c.cfg, err, c.want)
		}
	}

	clock := ratelimittest.NewClock()
	k := newKeyed(t, fixedwindow.Config{Limit: 3, Window: time.Second, Queue: ratelimit.Queue{Limit: 3}}, memory.WithClock(clock))
	done, cancel := context.WithCancel(bg)
	cancel()
	for _, c := range []struct {
		ctx     context.Context
		permits int
		want    error
	}{
		{bg, -1, ratelimit.ErrInvalidPermits},
		{bg, 4, ratelimit.ErrExceedsLimit},
		{nil, 1, ratelimit.ErrNilContext},
		{done, 1, context.Canceled},
	} {
		if _, err := k.Acquire(c.ctx, "a", c.permits); !errors.Is(err, c.want) {
			t.Errorf("Acquire(%d): %v, want %v", c.permits, err, c.want)
		}
		if _, err := k.Wait(c.ctx, "a", c.permits); !errors.Is(err, c.want) {
			t.Errorf("Wait(%d): %v, want %v", c.permits, err, c.want)
		}
	}
	if s := k.Stats(); s.Keys != 0 || s.Created != 0 {
		t.Fatalf("after rejected calls: %+v, want no key", s)
	}
	if l, _ := k.Acquire(bg, "a", 3); !l.Acquired() {
		t.Fatalf("Acquire(3) after rejected calls: %v, want granted", l)
	}
	if err := control.Refund(bg, k.For("a"), ratelimit.Lease{}, 4); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("Refund(4): %v, want ErrExceedsLimit", err)
	}
	if err := control.Reset(nil, k.For("a")); !errors.Is(err, ratelimit.ErrNilContext) {
		t.Fatalf("Reset(nil ctx): %v, want ErrNilContext", err)
	}
	if l, _ := k.Acquire(bg, "a", 1); l.Acquired() {
		t.Fatalf("Acquire(1) with the window spent: %v, want refused (the rejected calls gave nothing back)", l)
	}

}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// A Keyed not made by NewKeyed, a closed one, and Close twice.
func TestKeyedLifecycle(t *testing.T) {
	var zero memory.Keyed
	if _, err := zero.Acquire(bg, "a", 1); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("zero Keyed's Acquire: %v, want ErrInvalidConfig", err)
	}
	if err := zero.Reconfigure(fixedwindow.Config{Limit: 1, Window: time.Second}); !errors.Is(err, ratelimit.ErrInvalidConfig) {
		t.Fatalf("zero Keyed's Reconfigure: %v, want ErrInvalidConfig", err)
	}
	if zero.For("a") != nil || zero.Close() != nil || zero.Stats() != (memory.KeyedStats{}) || zero.Config() != nil {
		t.Fatalf("zero Keyed: a For, a Close error or Stats")
	}

	clock := ratelimittest.NewClock()
	k, err := memory.NewKeyed(concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	held, _ := k.Acquire(bg, "a", 1)
	w := goKeyedWait(t, k, bg, "a", 1)
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-w; a.err != nil || a.lease.Reason() != ratelimit.ReasonClosed {
		t.Fatalf("waiter at Close: %v, %v; want refused ReasonClosed", a.lease, a.err)
	}
	held.Release() // does nothing, and must not panic
	for name, err := range map[string]error{
		"Acquire":     second(k.Acquire(bg, "a", 1)),
		"Wait":        second(k.Wait(bg, "b", 1)),
		"Reconfigure": k.Reconfigure(concurrency.Config{Limit: 2}),
		"Refund":      control.Refund(bg, k.For("a"), held, 1),
		"Reset":       control.Reset(bg, k.For("a")),
	} {
		if !errors.Is(err, ratelimit.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := k.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func second(_ ratelimit.Lease, err error) error { return err }

// goKeyedWait starts k.Wait and returns once it has queued.
func goKeyedWait(t *testing.T, k *memory.Keyed, ctx context.Context, key string, permits int) chan answer {
	t.Helper()
	ch := make(chan answer, 1)
	log := &ratelimittest.QueueLog{}
	go func() {
		lease, err := k.Wait(waittrace.WithHooks(ctx, log.Hooks()), key, permits)
		ch <- answer{lease, err}
	}()
	select {
	case <-log.Joined():
	case a := <-ch:
		t.Fatalf("Wait(%q, %d) answered at once: %v, %v", key, permits, a.lease, a.err)
	case <-time.After(5 * time.Second):
		t.Fatalf("Wait(%q, %d) not queued in 5s", key, permits)
	}
	return ch
}

// A key is evicted once idle (initial, nobody waiting, nothing held) for
// the idle timeout, and never before: not while a waiter queues, a permit
// is held or its state is not back; the sweeper runs every quarter of it.
func TestKeyedEvictsIdleKeysOnly(t *testing.T) {
	clock := ratelimittest.NewClock()
	const idle = 4 * time.Second
	k := newKeyed(t, fixedwindow.Config{Limit: 2, Window: 10 * time.Second, Queue: ratelimit.Queue{Limit: 2}},
		memory.WithClock(clock), memory.WithIdleTimeout(idle))
	k.Acquire(bg, "a", 1)
	k.Acquire(bg, "b", 2)
	w := goKeyedWait(t, k, bg, "b", 1) // until b's window ends, at 10s
	clock.Advance(9 * time.Second)
	if s := k.Stats(); s.Keys != 2 || s.Evicted != 0 {
		t.Fatalf("within the window: %+v, want 2 keys, none evicted", s)
	}
	clock.Advance(time.Second) // the window ends: b's waiter takes 1 of the next
	granted(t, w, "b's waiter")
	clock.Advance(idle) // a: idle for 4s, evicted by a sweep within 1s more
	clock.Advance(time.Second)
	if s := k.Stats(); s.Keys != 1 || s.Evicted != 1 {
		t.Fatalf("a idle for 5s: %+v, want b left, a evicted", s)
	}
	if _, ok := k.For("b").(interface{ IdleFor() (time.Duration, bool) }).IdleFor(); ok {
		t.Fatalf("b idle with a permit of its window in use")
	}
	clock.Advance(4*time.Second + idle + time.Second) // b's window ends at 20s, b idle for 4s
	if s := k.Stats(); s.Keys != 0 || s.Evicted != 2 || s.Created != 2 {
		t.Fatalf("both idle: %+v, want both evicted", s)
	}
	if l, _ := k.Acquire(bg, "a", 2); !l.Acquired() || l.Remaining() != 0 {
		t.Fatalf("a evicted, then Acquire(2): %v, want granted as a new key", l)
	}

	// A concurrency key is held by its limiter: never evicted while a
	// permit is held or a waiter queues, however long.
	c := newKeyed(t, concurrency.Config{Limit: 1, Queue: ratelimit.Queue{Limit: 1}}, memory.WithClock(clock), memory.WithIdleTimeout(idle))
	lease, _ := c.Acquire(bg, "c", 1)
	w = goKeyedWait(t, c, bg, "c", 1)
	clock.Advance(10 * idle)
	if s := c.Stats(); s.Keys != 1 {
		t.Fatalf("a permit held and a waiter: %+v, want the key kept", s)
	}
	lease.Release()
	a := <-w
	clock.Advance(10 * idle)
	if s := c.Stats(); s.Keys != 1 {
		t.Fatalf("the waiter's permit held: %+v, want the key kept", s)
	}
	a.lease.Release()
	a.lease.Release() // twice: nothing more
	clock.Advance(idle + idle/4)
	if s := c.Stats(); s.Keys != 0 || s.Evicted != 1 {
		t.Fatalf("every permit back: %+v, want the key evicted", s)
	}
	lease.Release() // a stale copy of a lease of the evicted limiter: nothing
	if l, _ := c.Acquire(bg, "c", 1); !l.Acquired() {
		t.Fatalf("Acquire(1) on the key made again: %v", l)
	}
	if l, _ := c.Acquire(bg, "c", 1); l.Acquired() {
		t.Fatalf("a second Acquire(1) over a limit of 1: granted")
	}
}

// A token bucket key whose Wait queues is moved to a limiter of its own,
// with its state, and back once the Wait returns: its reservation,
// cancelled, gives its tokens back, and the key is then initial.
func TestKeyedWaitMovesStateAndBack(t *testing.T) {
	clock := ratelimittest.NewClock()
	k := newKeyed(t, tokenbucket.Config{Rate: 1, Burst: 2, Queue: ratelimit.Queue{Limit: 4}}, memory.WithClock(clock), memory.WithIdleTimeout(time.Minute))
	k.Acquire(bg, "a", 2)
	ctx, cancel := context.WithCancel(bg)
	w := goKeyedWait(t, k, ctx, "a", 2) // due in 2s
	if l, _ := k.Acquire(bg, "a", 1); l.Acquired() {
		t.Fatalf("Acquire(1) behind a reservation: granted")
	}
	clock.Advance(time.Second)
	cancel()
	if a := <-w; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v, %v", a.lease, a.err)
	}
	// 1s refilled one token; the reservation's 2 came back: 1 of 2.
	if l, _ := k.Acquire(bg, "a", 0); l.Remaining() != 1 {
		t.Fatalf("after the cancel: %v, want 1 remaining", l)
	}
	clock.Advance(time.Second + time.Minute + 15*time.Second)
	if s := k.Stats(); s.Keys != 0 || s.Evicted != 1 {
		t.Fatalf("a full for a minute: %+v, want it evicted", s)
	}
}

// At WithMaxKeys busy keys a new key is refused (ReasonNoPartition), and
// takes the place of a key once one is idle; busy keys are never evicted.
func TestKeyedMaxKeys(t *testing.T) {
	clock := ratelimittest.NewClock()
	k := newKeyed(t, slidinglog.Config{Limit: 1, Window: time.Second}, memory.WithClock(clock), memory.WithMaxKeys(2), memory.WithIdleTimeout(time.Hour))
	k.Acquire(bg, "a", 1)
	k.Acquire(bg, "b", 1)
	l, err := k.Acquire(bg, "c", 1)
	if err != nil || l.Acquired() || l.Reason() != ratelimit.ReasonNoPartition {
		t.Fatalf("a third key while 2 are busy: %v, %v; want refused ReasonNoPartition", l, err)
	}
	if _, ok := l.RetryAfter(); ok {
		t.Fatalf("ReasonNoPartition with a RetryAfter: %v", l)
	}
	if l, _ := k.Wait(bg, "c", 1); l.Reason() != ratelimit.ReasonNoPartition {
		t.Fatalf("Wait on a third key while 2 are busy: %v, want ReasonNoPartition", l)
	}
	if s := k.Stats(); s != (memory.KeyedStats{Keys: 2, Created: 2, Refused: 2}) {
		t.Fatalf("Stats = %+v", s)
	}
	clock.Advance(time.Second) // a and b idle: one makes room
	if l, _ := k.Acquire(bg, "c", 1); !l.Acquired() {
		t.Fatalf("a third key once the others are idle: %v, want granted", l)
	}
	if s := k.Stats(); s != (memory.KeyedStats{Keys: 2, Created: 3, Evicted: 1, Refused: 2}) {
		t.Fatalf("Stats = %+v", s)
	}
}

// For(key) is the key's limiter: control reaches its Refund and Reset;
// Stats and Reconfigure are the Keyed's, not a key's.
func TestKeyedForControl(t *testing.T) {
	clock := ratelimittest.NewClock()
	k := newKeyed(t, fixedwindow.Config{Limit: 2, Window: time.Minute}, memory.WithClock(clock))
	a := k.For("a")
	g, _ := a.Acquire(bg, 2)
	if err := control.Refund(bg, a, g, 2); err != nil {
		t.Fatal(err)
	}
	if l, _ := k.Acquire(bg, "a", 2); !l.Acquired() {
		t.Fatalf("Acquire(2) after the refund of 2: %v", l)
	}
	if err := control.Reset(bg, a); err != nil {
		t.Fatal(err)
	}
	if l, _ := a.Acquire(bg, 2); !l.Acquired() {
		t.Fatalf("Acquire(2) after Reset: %v", l)
	}
	if _, err := control.Stats(a); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("control.Stats of a key: %v, want ErrUnsupported", err)
	}
	if err := control.Reconfigure(a, fixedwindow.Config{Limit: 3, Window: time.Minute}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("control.Reconfigure of a key: %v, want ErrUnsupported", err)
	}
	// A Chain of a key and a global limit is all or nothing.
	global, _ := memory.New(fixedwindow.Config{Limit: 1, Window: time.Minute}, memory.WithClock(clock))
	defer global.Close()
	global.Acquire(bg, 1)
	if l, _ := ratelimit.Chain(k.For("b"), global).Acquire(bg, 1); l.Acquired() {
		t.Fatalf("Chain with the global limit spent: granted")
	}
	if l, _ := k.Acquire(bg, "b", 2); !l.Acquired() {
		t.Fatalf("b after the Chain's refusal: %v, want its 2 permits (the Chain gave back what b granted)", l)
	}
}

// Reconfigure validates once and applies to every key, carrying each
// state over; a refused config changes nothing, for any key.
func TestKeyedReconfigure(t *testing.T) {
	clock := ratelimittest.NewClock()
	k := newKeyed(t, tokenbucket.Config{Rate: 1, Burst: 2}, memory.WithClock(clock))
	k.Acquire(bg, "a", 2)
	k.Acquire(bg, "b", 1)
	for _, cfg := range []ratelimit.Config{tokenbucket.Config{Rate: 1, Burst: 0}, fixedwindow.Config{Limit: 4, Window: time.Second}, nil} {
		if err := k.Reconfigure(cfg); !errors.Is(err, ratelimit.ErrInvalidConfig) {
			t.Fatalf("Reconfigure(%#v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if got := k.Config(); got != (tokenbucket.Config{Rate: 1, Burst: 2}) {
		t.Fatalf("Config() after refused changes = %#v, want the first", got)
	}
	if err := k.Reconfigure(&tokenbucket.Config{Rate: 1, Burst: 2}); err != nil {
		t.Fatalf("Reconfigure with the config in force: %v", err)
	}
	if err := k.Reconfigure(tokenbucket.Config{Rate: 1, Burst: 4}); err != nil {
		t.Fatal(err)
	}
	if got := k.Config(); got != (tokenbucket.Config{Rate: 1, Burst: 4}) {
		t.Fatalf("Config() after Reconfigure = %#v", got)
	}
	// Each key keeps its whole tokens, clamped to the new burst; a key
	// not seen starts full.
	for key, want := range map[string]int64{"a": 0, "b": 1, "c": 4} {
		if l, _ := k.Acquire(bg, key, 0); l.Remaining() != want || l.Limit() != 4 {
			t.Errorf("key %q after the change: %v, want %d remaining of 4", key, l, want)
		}
	}
	if _, err := k.Acquire(bg, "c", 4); err != nil {
		t.Fatalf("Acquire(4) under a burst of 4: %v", err)
	}
}

// A decision on a known key allocates nothing.
func TestKeyedDecisionsAllocateNothing(t *testing.T) {
	for _, c := range benchConfigs {
		k := newKeyed(t, c.cfg)
		k.Acquire(bg, "10.0.0.1", 1)
		if n := testing.AllocsPerRun(100, func() {
			l, _ := k.Acquire(bg, "10.0.0.1", 1)
			l.Release()
		}); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", c.name, n)
		}
	}
}

// The keys of a burst, once evicted, leave their memory: the tables and
// maps shrink.
func TestKeyedGivesMemoryBack(t *testing.T) {
	const keys = 20_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "10." + strconv.Itoa(i)
	}
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	for _, cfg := range []ratelimit.Config{fixedwindow.Config{Limit: 1, Window: time.Second}, concurrency.Config{Limit: 1}} {
		clock := ratelimittest.NewClock()
		h0 := heap()
		k := newKeyed(t, cfg, memory.WithClock(clock), memory.WithIdleTimeout(time.Second))
		for _, n := range names {
			l, _ := k.Acquire(bg, n, 1)
			l.Release()
		}
		full := heap() - h0
		clock.Advance(3 * time.Second)
		if s := k.Stats(); s.Keys != 0 || s.Evicted != keys {
			t.Fatalf("%T: %+v, want every key evicted", cfg, s)
		}
		if left := heap() - h0; left > full/8 {
			t.Fatalf("%T: %d bytes for %d keys, %d left once they are evicted, want at most an eighth", cfg, full, keys, left)
		}
	}
}

// On the real clock, under contention, while the sweeper runs every
// millisecond: a window's keys are never idle and each grants exactly its
// limit; concurrency keys, evicted whenever idle and made again, never
// hold more than their limit.
func TestKeyedUnderContention(t *testing.T) {
	const goroutines, keys = 8, 8
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("k", i)
	}
	t.Run("fixedwindow", func(t *testing.T) {
		const limit = 50
		k := newKeyed(t, fixedwindow.Config{Limit: limit, Window: time.Hour, Queue: ratelimit.Queue{Limit: 4}}, memory.WithIdleTimeout(4*time.Millisecond))
		var granted [keys]atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(g)))
				for range 400 {
					i := rng.Intn(keys)
					var l ratelimit.Lease
					var err error
					if rng.Intn(4) == 0 {
						ctx, cancel := context.WithTimeout(bg, time.Millisecond)
						l, err = k.Wait(ctx, names[i], 1)
						cancel()
					} else {
						l, err = k.Acquire(bg, names[i], 1)
					}
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
						return
					}
					if l.Acquired() {
						granted[i].Add(1)
					}
				}
			}(g)
		}
		wg.Wait()
		for i := range granted {
			if n := granted[i].Load(); n != limit {
				t.Errorf("key %d: %d granted, want exactly %d", i, n, limit)
			}
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		const limit = 2
		k := newKeyed(t, concurrency.Config{Limit: limit, Queue: ratelimit.Queue{Limit: 4}}, memory.WithIdleTimeout(4*time.Millisecond))
		var held [keys]atomic.Int64
		round := func() {
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(g)))
					for range 300 {
						i := rng.Intn(keys)
						ctx, cancel := context.WithTimeout(bg, time.Millisecond)
						l, err := k.Wait(ctx, names[i], 1)
						cancel()
						if err != nil && !errors.Is(err, context.DeadlineExceeded) {
							t.Error(err)
							return
						}
						if !l.Acquired() {
							continue
						}
						if n := held[i].Add(1); n > limit {
							t.Errorf("key %d: %d permits held, limit %d", i, n, limit)
						}
						if rng.Intn(8) == 0 {
							time.Sleep(100 * time.Microsecond)
						}
						held[i].Add(-1)
						l.Release()
					}
				}(g)
			}
			wg.Wait()
		}
		round()
		// Idle, every key is evicted; then made again as it is used.
		for deadline := time.Now().Add(5 * time.Second); k.Stats().Keys != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%+v: idle keys left 5s after the last call", k.Stats())
			}
		}
		round()
		if s := k.Stats(); s.Created <= keys || s.Evicted < keys {
			t.Errorf("%+v: want every key evicted and made again", s)
		}
	})
}

// A key's limiter settles as a limiter of its own does: the settlement
// scenarios (figures given back and charged, bad settlements that change
// nothing, concurrency refusing to settle, concurrent settlements).
func TestKeyedSettle(t *testing.T) { conformance.RunSettle(t, keyedFactory) }

// A charge on a key evicted since its grant (back in its initial state,
// with no entry) is counted in a new entry: the debt holds.
func TestKeyedChargeOfEvictedKey(t *testing.T) {
	clock := ratelimittest.NewClock()
	k, err := memory.NewKeyed(fixedwindow.Config{Limit: 10, Window: time.Second}, memory.WithClock(clock), memory.WithIdleTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	lease, err := control.Reserve(bg, k.For("a"), 10)
	if err != nil || !lease.Acquired() {
		t.Fatalf("Reserve: %v, %v", lease, err)
	}
	if err := control.Settle(bg, k.For("a"), lease, 0); err != nil { // all back: the key is initial
		t.Fatal(err)
	}
	lease, _ = k.Acquire(bg, "a", 1)
	if err := control.Refund(bg, k.For("a"), lease, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second) // idle for 4s: evicted by a sweep within 1s more
	if n := k.Stats().Keys; n != 0 {
		t.Fatalf("%d keys live, want the initial key evicted", n)
	}
	if err := control.Settle(bg, k.For("a"), lease.Reserve(1), 11); err != nil {
		t.Fatalf("a charge of 10 on an evicted key: %v", err)
	}
	if g, _ := k.Acquire(bg, "a", 1); g.Acquired() {
		t.Fatalf("after a charge of 10 on a limit of 10: %v, want refused", g)
	}
}
