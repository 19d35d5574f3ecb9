package redis

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestBatchDecidesAsOneByOne: a batch (decisions of several limiters of
// every algorithm, one script call per algorithm, pipelined) replies
// exactly what the same calls made one by one reply, on miniredis and on a
// real server, at pinned instants.
func TestBatchDecidesAsOneByOne(t *testing.T) {
	ctx := context.Background()
	for name, c := range bothServers(t) {
		t.Run(name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			// Limiters of every algorithm, three keys each: two made by
			// one Factory (their parameters go once per batch), one by
			// another, with another limit; their twins decide one by one.
			var one, batched []*Limiter
			for _, a := range conformance.Algorithms() {
				var factories [2]*Factory
				for i := range factories {
					var err error
					if factories[i], err = NewFactory(c, a.Config(5+i*4, ratelimit.Queue{}), WithClock(clock), WithoutRefusalCache()); err != nil {
						t.Fatal(err)
					}
				}
				for k := 0; k < 3; k++ {
					cfg := a.Config(5+k/2*4, ratelimit.Queue{})
					key := fmt.Sprintf("%s-%d", a.Name, k)
					o, err := New(c, "one-"+key, cfg, WithClock(clock), WithoutRefusalCache(), WithoutCoalescing())
					if err != nil {
						t.Fatal(err)
					}
					b, _ := factories[k/2].New("batched-" + key)
					one, batched = append(one, o), append(batched, b)
				}
			}
			rng := rand.New(rand.NewSource(1))
			decisions, multi := 0, 0
			for round := 0; round < 60; round++ {
				now := clock.Now()
				var batch []*pending
				var want []reply
				scripts := map[*luaScript]bool{}
				for i := 0; i < 2+rng.Intn(20); i++ {
					j := rng.Intn(len(one))
					p := int64(rng.Intn(4))
					r, err := one[j].call(ctx, now, opAcquire, p, one[j].tail(one[j].holderID())...)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, r)
					b := batched[j]
					batch = append(batch, &pending{d: b.job(b.own(now, opAcquire, p, b.tail(b.holderID()))), done: make(chan struct{})})
					scripts[b.script] = true
				}
				if len(scripts) > 1 {
					multi++
				}
				batched[0].pipe.exec(batch)
				for i, p := range batch {
					if p.err != nil {
						t.Fatalf("round %d, decision %d: %v", round, i, p.err)
					}
					got, err := parseReply(p.v)
					if err != nil || got != want[i] {
						t.Fatalf("round %d, decision %d (%s): batched %+v (%v), one by one %+v", round, i, p.d.keys[0], got, err, want[i])
					}
					decisions++
				}
				clock.Advance(time.Duration(rng.Intn(400)) * time.Millisecond)
			}
			if decisions < 300 || multi < 30 {
				t.Fatalf("only %d decisions compared, %d batches of several scripts", decisions, multi)
			}
		})
	}
}

// bothServers returns a client of miniredis and one of a real server,
// by name, closed when t ends.
func bothServers(t *testing.T) map[string]*goredis.Client {
	clients := map[string]*goredis.Client{
		"miniredis": goredis.NewClient(&goredis.Options{Addr: miniredis.RunT(t).Addr()}),
		"redis":     goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr}),
	}
	for _, c := range clients {
		t.Cleanup(func() { c.Close() })
	}
	return clients
}

// TestBatchKeepsArrivalOrder: a token bucket's queue order holds in a batch
// as in a lone call (the batch sends the parameters once, as numbers): with
// a reservation given back, tokens are free before the horizon, and a
// newcomer in a batch is refused behind the waiters (OldestFirst) or
// granted (NewestFirst).
func TestBatchKeepsArrivalOrder(t *testing.T) {
	ctx := context.Background()
	for name, c := range bothServers(t) {
		for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
			t.Run(name+"/"+order.String(), func(t *testing.T) {
				clock := ratelimittest.NewClock()
				cfg := tokenbucket.Config{Rate: 10, Burst: 2, Queue: ratelimit.Queue{Limit: 10, Order: order}}
				l, err := New(c, "arrival-"+order.String(), cfg, WithClock(clock), WithoutRefusalCache())
				if err != nil {
					t.Fatal(err)
				}
				// Empty the bucket, reserve 2 (due at +200ms, the horizon)
				// and give them back: at +100ms a token is free, before
				// the horizon.
				now := clock.Now()
				for _, step := range []struct {
					op    string
					p     int64
					extra interface{}
				}{{opAcquire, 2, -1}, {opWait, 2, -1}, {opCancel, 2, 0}} {
					if r, err := l.call(ctx, now, step.op, step.p, step.extra); err != nil || !r.granted {
						t.Fatalf("op %q: %+v %v, want granted", step.op, r, err)
					}
				}
				clock.Advance(100 * time.Millisecond)
				newcomer := func() *pending {
					return &pending{d: l.job(l.own(clock.Now(), opAcquire, 1, l.tail(""))), done: make(chan struct{})}
				}
				batch := []*pending{newcomer(), newcomer()}
				l.pipe.send(ctx, batch)
				r, err := parseReply(batch[0].v)
				if err != nil || batch[0].err != nil {
					t.Fatalf("the batch's first decision: %v %v", err, batch[0].err)
				}
				if order == ratelimit.NewestFirst && !r.granted {
					t.Fatalf("NewestFirst newcomer in a batch: %+v, want granted (a token is free)", r)
				}
				if order == ratelimit.OldestFirst && (r.granted || r.retryAfter != 100*time.Millisecond) {
					t.Fatalf("OldestFirst newcomer in a batch: %+v, want refused behind the waiters, retry 100ms", r)
				}
			})
		}
	}
}

// TestBatcherDropsCancelledCall: a call whose ctx ends while it waits in the
// queue (every sender busy) is dropped, so its decision is never made.
func TestBatcherDropsCancelledCall(t *testing.T) {
	mini := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { c.Close() })
	clock := ratelimittest.NewClock()
	l, err := New(c, "k", fixedwindow.Config{Limit: 1, Window: time.Hour}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	b := l.pipe
	b.senders = maxSenders // all busy
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := b.do(ctx, l.job(l.own(clock.Now(), opAcquire, 1, nil)), time.Now())
		done <- err
	}()
	for queued := 0; queued == 0; {
		b.mu.Lock()
		queued = len(b.queue)
		b.mu.Unlock()
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("do = %v, want context.Canceled", err)
	}
	b.senders = 0
	if len(b.queue) != 0 {
		t.Fatalf("%d calls still queued", len(b.queue))
	}
	// The permit was never taken: the limit of 1 is still whole.
	if lease, err := l.Acquire(context.Background(), 1); err != nil || !lease.Acquired() {
		t.Fatalf("Acquire after the dropped call = %v, %v; want granted", lease, err)
	}
}

// TestQueuedAndSentCallsExpire: a call past its limiter's timeout is
// answered context.DeadlineExceeded by the pipe's timer whether it waits
// in the queue (its decision then never made) or in a batch in flight that
// never lands (a stalled sender, pretended here); and a sender that finds
// a call past its deadline in the queue answers it rather than sending it.
func TestQueuedAndSentCallsExpire(t *testing.T) {
	mini := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { c.Close() })
	l, err := New(c, "expire", fixedwindow.Config{Limit: 1, Window: time.Hour}, WithTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b := l.pipe
	b.senders = maxSenders // all busy: calls queue, and nothing drains them
	queue := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue)
	}
	// call makes one decision through the pipe; take, if set, runs once it
	// is queued.
	call := func(take func()) error {
		done := make(chan error, 1)
		go func() {
			_, err := b.do(context.Background(), l.job(l.own(time.Now(), opAcquire, 1, nil)), time.Now())
			done <- err
		}()
		for queue() == 0 {
			runtime.Gosched()
		}
		if take != nil {
			take()
		}
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the call was never answered")
			return nil
		}
	}

	if err := call(nil); err != context.DeadlineExceeded {
		t.Fatalf("a queued call past its timeout: %v, want context.DeadlineExceeded", err)
	}
	if n := queue(); n != 0 {
		t.Fatalf("%d calls still queued", n)
	}

	var stalled []*pending // taken by a sender (next) that then never sends it
	if err := call(func() { stalled = b.next() }); err != context.DeadlineExceeded {
		t.Fatalf("a call in a batch that never lands: %v, want context.DeadlineExceeded", err)
	}
	if len(stalled) != 1 {
		t.Fatalf("the sender took %d calls, want 1", len(stalled))
	}
	b.landed(stalled)

	late := &pending{d: l.job(l.own(time.Now(), opAcquire, 1, nil)), deadline: time.Now().Add(-time.Millisecond), done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, late)
	b.mu.Unlock()
	if batch := b.next(); batch != nil {
		t.Fatalf("next sent %d calls past their deadline", len(batch))
	}
	if late.err != context.DeadlineExceeded || !late.finished.Load() {
		t.Fatalf("the late call: %v, want answered context.DeadlineExceeded", late.err)
	}

	// None of the decisions was made: the limit of 1 is still whole (asked
	// through a limiter of the same key with the default timeout: this one's
	// is short for a loaded machine).
	again, err := New(c, "expire", fixedwindow.Config{Limit: 1, Window: time.Hour}, WithoutCoalescing())
	if err != nil {
		t.Fatal(err)
	}
	if lease, err := again.Acquire(context.Background(), 1); err != nil || !lease.Acquired() {
		t.Fatalf("Acquire after the expired calls = %v, %v; want granted", lease, err)
	}
}

type markKey struct{}

// ctxHook records, for each command, whether its ctx carries markKey, and
// whether it is a batch.
type ctxHook struct {
	mu            sync.Mutex
	marked, batch []bool
}

func (h *ctxHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *ctxHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		h.marked = append(h.marked, ctx.Value(markKey{}) != nil)
		h.batch = append(h.batch, slices.Contains(cmd.Args(), interface{}("batch")))
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *ctxHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestLoneCallGoesAlone: with coalescing on, a call that finds nobody else
// waiting is sent at once as a plain script call on its caller's ctx, as
// without coalescing.
func TestLoneCallGoesAlone(t *testing.T) {
	mini := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { c.Close() })
	var h ctxHook
	c.AddHook(&h)
	l, err := New(c, "k", fixedwindow.Config{Limit: 5, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), markKey{}, true)
	for i := 0; i < 3; i++ {
		if lease, err := l.Acquire(ctx, 1); err != nil || !lease.Acquired() {
			t.Fatalf("Acquire %d = %v, %v", i, lease, err)
		}
	}
	if len(h.marked) < 3 {
		t.Fatalf("%d commands for 3 calls", len(h.marked))
	}
	for i := range h.marked {
		if !h.marked[i] || h.batch[i] {
			t.Fatalf("command %d: on the caller's ctx %v, batch %v; want true, false", i, h.marked[i], h.batch[i])
		}
	}
	if l.pipe.senders != 0 {
		t.Fatalf("%d senders left after the calls", l.pipe.senders)
	}
}

// TestKeySlot: the Cluster hash slots of the Redis Cluster specification's
// examples (CRC16 of the hash tag, modulo 16384).
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":     0x31C3, // the specification's CRC16 check value
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"bar{hash_tag}": 2515,
		"{hash_tag}":    2515,
		"foo{{bar}}zap": keySlot("{bar"),
		"foo{bar}{zap}": keySlot("bar"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if hashTag("foo{}{hash_tag}") != "foo{}{hash_tag}" || hashTag("a{b") != "a{b" || hashTag("") != "" {
		t.Error("a key without a non-empty tag hashes whole")
	}
}

// batchHook counts the script calls that carry the decisions of several
// limiters (of one key each): more than one key.
type batchHook struct{ multi atomic.Int64 }

func (h *batchHook) count(cmd goredis.Cmder) {
	a := cmd.Args()
	if len(a) > 3 && (a[0] == "evalsha" || a[0] == "eval") {
		if n, ok := a[2].(int); ok && n > 1 {
			h.multi.Add(1)
		}
	}
}
func (h *batchHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *batchHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *batchHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// TestManyKeysBatched: 32 goroutines over 300 limiters of one client
// (single node, Cluster, Ring), each limiter asked 64 times for one permit
// of its 5: every limiter grants exactly 5, and no call fails: a batch
// never mixes the keys of two Cluster slots (which the server refuses) or
// two Ring shards. Script calls carried the decisions of several limiters
// on the single node and, for keys chosen to share three slots, on the
// Cluster; a Ring batches per key.
func TestManyKeysBatched(t *testing.T) {
	clients := map[string]goredis.UniversalClient{
		"single":  goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr}),
		"cluster": goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redistest.Cluster(t)}),
		"ring": goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{
			"a": redistest.Start(t).Addr, "b": redistest.Start(t).Addr,
		}}),
	}
	for _, c := range clients {
		t.Cleanup(func() { c.Close() })
	}
	ctx := context.Background()
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			var h batchHook
			c.AddHook(&h)
			const keys, goroutines, limit = 300, 32, 5
			f, err := NewFactory(c, fixedwindow.Config{Limit: limit, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			limiters := make([]*Limiter, 0, keys)
			slots := map[int]bool{}
			for i := 0; len(limiters) < keys; i++ {
				key := fmt.Sprintf("many-%s-%d", name, i)
				if name == "cluster" {
					slot := keySlot("{" + key + "}")
					if len(slots) == 3 && !slots[slot] {
						continue
					}
					slots[slot] = true
				}
				l, _ := f.New(key)
				limiters = append(limiters, l)
			}
			var granted [keys]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					order := rand.New(rand.NewSource(int64(g))).Perm(keys)
					for pass := 0; pass < 2; pass++ {
						for _, k := range order {
							lease, err := limiters[k].Acquire(ctx, 1)
							if err != nil {
								errs <- err
								return
							}
							if lease.Acquired() {
								granted[k].Add(1)
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k := range granted {
				if n := granted[k].Load(); n != limit {
					t.Fatalf("limiter %d granted %d, want %d", k, n, limit)
				}
			}
			if h.multi.Load() == 0 && name != "ring" {
				t.Fatal("no script call carried several limiters' decisions")
			}
			t.Logf("%d script calls of several limiters", h.multi.Load())
		})
	}
}

// TestPipeCollected: a pipe lives as long as a limiter holds it; once its
// limiters are gone it is collected and its registry entry (which holds
// the client) removed.
func TestPipeCollected(t *testing.T) {
	mini := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { c.Close() })
	registered := func() bool {
		pipesMu.Lock()
		defer pipesMu.Unlock()
		_, ok := pipes[pipeKey{client: c, slot: -1}]
		return ok
	}
	func() { // the limiter is gone when this returns
		l, err := New(c, "collected", fixedwindow.Config{Limit: 1, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		if !registered() || pipeFor(c, l.keys) != l.pipe {
			t.Fatal("a live limiter's pipe is not the client's registered pipe")
		}
	}()
	for i := 0; i < 100 && registered(); i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if registered() {
		t.Fatal("the pipe of a client without limiters is still registered")
	}
}

// TestBatchDecisionFailsAlone: a decision that fails in a batch (its key
// holds another type) replies its error and leaves the batch's other
// decisions, of other limiters and algorithms, made and counted, on
// miniredis and on a real server.
func TestBatchDecisionFailsAlone(t *testing.T) {
	mini := miniredis.RunT(t)
	for name, c := range map[string]*goredis.Client{
		"miniredis": goredis.NewClient(&goredis.Options{Addr: mini.Addr()}),
		"redis":     goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr}),
	} {
		t.Cleanup(func() { c.Close() })
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			good, _ := New(c, "good", concurrency.Config{Limit: 10})
			poisoned, _ := New(c, "poisoned", concurrency.Config{Limit: 10})
			window, _ := New(c, "window", fixedwindow.Config{Limit: 10, Window: time.Hour})
			poisonedWindow, _ := New(c, "poisoned-window", fixedwindow.Config{Limit: 10, Window: time.Hour})
			c.Set(ctx, poisoned.keys[0], "not a sorted set", 0)
			c.LPush(ctx, poisonedWindow.keys[0], "not a window")
			decide := func(l *Limiter, p int64) *pending {
				var id string
				if l.release {
					id = l.holderID()
				}
				return &pending{d: l.job(l.own(time.Now(), opAcquire, p, l.tail(id))), done: make(chan struct{})}
			}
			batch := []*pending{decide(good, 3), decide(poisoned, 1), decide(window, 2), decide(good, 3), decide(poisonedWindow, 1), decide(window, 2)}
			good.pipe.exec(batch)
			for i, p := range batch {
				failed := &p.d.keys[0] == &poisoned.keys[0] || &p.d.keys[0] == &poisonedWindow.keys[0]
				if failed != (p.err != nil) || failed && !strings.Contains(p.err.Error(), "WRONGTYPE") {
					t.Fatalf("decision %d (%s): %v", i, p.d.keys[0], p.err)
				}
				if r, err := parseReply(p.v); !failed && (err != nil || !r.granted) {
					t.Fatalf("decision %d (%s): %+v %v, want a grant", i, p.d.keys[0], r, err)
				}
			}
			for _, want := range []struct {
				l         *Limiter
				available int64
			}{{good, 4}, {window, 6}} {
				if s, err := want.l.StatsContext(ctx); err != nil || s.Available != want.available {
					t.Errorf("%s after the batch: %+v %v, want %d available", want.l.keys[0], s, err, want.available)
				}
			}
		})
	}
}

// TestRetriedAcquireCountsOnce: a concurrency acquire made twice with the
// same holder (go-redis retries a call whose reply it lost) holds its
// permits once.
func TestRetriedAcquireCountsOnce(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr})
	t.Cleanup(func() { c.Close() })
	l, err := New(c, "retried", concurrency.Config{Limit: 10}, WithoutCoalescing())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := l.holderID()
	for i := 0; i < 2; i++ {
		if r, err := l.call(ctx, time.Now(), opAcquire, 4, id); err != nil || !r.granted {
			t.Fatalf("acquire %d: %+v %v", i, r, err)
		}
	}
	if s, err := l.StatsContext(ctx); err != nil || s.Available != 6 {
		t.Fatalf("after the same acquire twice: %+v %v, want 6 available", s, err)
	}
}

// TestScriptProtocol: the scripts name the ops and refusal codes that
// protocolLua declares from script.go's constants, never a literal.
func TestScriptProtocol(t *testing.T) {
	scripts := lua("tokenbucket") + lua("fixedwindow") + lua("log") + lua("slidingwindow") + lua("concurrency")
	for name, op := range map[string]string{"OP_WAIT": opWait, "OP_CANCEL": opCancel, "OP_REFUND": opRefund, "OP_RELEASE": opRelease, "OP_RENEW": opRenew} {
		if !strings.Contains(scripts, "op == "+name) && !strings.Contains(scripts, "op ~= "+name) {
			t.Errorf("no script reads the op %s", name)
		}
		if strings.Contains(scripts, "'"+op+"'") {
			t.Errorf("a script names the op %s as the literal %q", name, op)
		}
	}
	want := fmt.Sprintf("local OP_ACQUIRE, OP_WAIT, OP_CANCEL, OP_REFUND, OP_RELEASE, OP_RENEW = '%s', '%s', '%s', '%s', '%s', '%s'", opAcquire, opWait, opCancel, opRefund, opRelease, opRenew)
	if !strings.Contains(protocolLua, want) {
		t.Errorf("protocolLua lacks %q:\n%s", want, protocolLua)
	}
	if want := fmt.Sprintf("REFUSED_QUEUE_FULL, REFUSED_DEADLINE = %d, %d", refusedQueueFull, refusedDeadline); !strings.Contains(protocolLua, want) {
		t.Errorf("protocolLua lacks %q", want)
	}
	s, err := scriptOf([]string{"fixedwindow"})
	if err != nil || !strings.HasPrefix(s.src, protocolLua+prelude) {
		t.Errorf("a script does not start with protocolLua and the prelude: %v", err)
	}
}

// TestMalformedBatchIsRefused: a batch whose counts do not match its
// arguments and keys is an error reply, whatever the counts say (a huge
// one included), and the server answers the next call.
func TestMalformedBatchIsRefused(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	keys := []string{"malformed{k}:fw"}
	// A fixed window's batch: 'batch', h, np, limit, window (us), nl, then
	// per limiter nk, nd, and per decision n and its arguments.
	group := []interface{}{"batch", headLen, 2, 5, 1000000, 1}
	for name, args := range map[string][]interface{}{
		"head length 0":        {"batch", 0},
		"huge argument count":  append(group, 1, 1, 1e15, "", 1, opAcquire),
		"more keys than given": append(group, 2, 1, 3, "", 1, opAcquire),
		"truncated":            append(group, 1, 1, 4),
		"negative count":       append(group, -1),
	} {
		fixedWindow, err := scriptOf([]string{"fixedwindow"})
		if err != nil {
			t.Fatal(err)
		}
		call := fixedWindow.call(keys, len(args))
		call.cmd = append(call.cmd, args...)
		err = call.run(ctx, c).Err()
		if err == nil || !strings.Contains(err.Error(), "malformed batch") {
			t.Errorf("%s: %v, want a malformed batch error", name, err)
		}
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the server after the malformed batches: %v", err)
	}
}

// TestBatchWithoutTimeoutIsNotCut: a batch mixing a limiter without a
// timeout (WithTimeout(0)) and one with a short one, sent while the server
// sleeps: the sender moves on after the short timeout, and the decision of
// the limiter without one is made once the server answers, not failed at
// the other's deadline (with a client that honours deadlines too).
func TestBatchWithoutTimeoutIsNotCut(t *testing.T) {
	addr := debugServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	unbounded, _ := New(c, "unbounded", fixedwindow.Config{Limit: 10, Window: time.Hour}, WithTimeout(0))
	short, _ := New(c, "short", fixedwindow.Config{Limit: 10, Window: time.Hour}, WithTimeout(callTimeout))
	for _, l := range []*Limiter{unbounded, short} {
		if _, err := l.Acquire(ctx, 0); err != nil { // loads the script
			t.Fatal(err)
		}
	}
	decide := func(l *Limiter) *pending {
		return &pending{d: l.job(l.own(time.Now(), opAcquire, 1, nil)), done: make(chan struct{})}
	}
	batch := []*pending{decide(unbounded), decide(short)}
	woken := pause(t, addr)
	start := time.Now()
	unbounded.pipe.exec(batch)
	if took := time.Since(start); took > answerWithin {
		t.Errorf("the sender was held %v, want about the longest timeout (%v)", took, callTimeout)
	}
	<-woken
	select {
	case <-batch[0].done:
		if r, err := parseReply(batch[0].v); batch[0].err != nil || err != nil || !r.granted {
			t.Fatalf("the decision without a timeout: %+v %v %v, want a grant once the server answered", r, batch[0].err, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the decision without a timeout got no answer after the server woke")
	}
}

// TestFullBatchStartsASender: with every sender busy (pretended here, as
// on a slow link) and a full batch queued, a caller starts one more
// sender, which sends the queued calls and its own.
func TestFullBatchStartsASender(t *testing.T) {
	mini := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { c.Close() })
	l, err := New(c, "full", fixedwindow.Config{Limit: 1000, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b := l.pipe
	queued := make([]*pending, maxBatch)
	b.mu.Lock()
	b.senders = maxSenders // all busy
	for i := range queued {
		queued[i] = &pending{d: l.job(l.own(time.Now(), opAcquire, 1, nil)), done: make(chan struct{})}
		b.queue = append(b.queue, queued[i])
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := b.do(ctx, l.job(l.own(time.Now(), opAcquire, 1, nil)), time.Now())
	if r, perr := parseReply(v); err != nil || perr != nil || !r.granted {
		t.Fatalf("the caller behind a full batch: %+v %v %v, want a grant", r, err, perr)
	}
	for i, p := range queued {
		select {
		case <-p.done:
		case <-ctx.Done():
			t.Fatalf("queued call %d not sent", i)
		}
	}
}

// BenchmarkBatchServerTime: the server's time (INFO commandstats) per
// script call of a batch of 1, 20 and 60 token-bucket decisions on one
// key, and what each decision past the first 20 adds (b.N is ignored:
// 2,000 calls each; run with -benchtime=1x).
func BenchmarkBatchServerTime(b *testing.B) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(b).Addr})
	defer c.Close()
	ctx := context.Background()
	f, err := NewFactory(c, tokenbucket.Config{Rate: 1000, Burst: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	l, _ := f.New("server-time")
	perCall := map[int]float64{}
	for _, n := range []int{1, 20, 60} {
		var batch []*pending
		for range n {
			batch = append(batch, &pending{d: l.job(l.own(time.Now(), opAcquire, 1, nil))})
		}
		call := group(batch)[0]
		if err := call.run(ctx, c).Err(); err != nil { // loads the script
			b.Fatal(err)
		}
		c.ConfigResetStat(ctx)
		for range 2000 {
			if err := c.Do(ctx, call.cmd...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		stats := c.Info(ctx, "commandstats").Val()
		i := strings.Index(stats, "cmdstat_evalsha:")
		var calls, usec int64
		if i < 0 {
			b.Fatalf("no EVALSHA in %q", stats)
		}
		if _, err := fmt.Sscanf(stats[i:], "cmdstat_evalsha:calls=%d,usec=%d", &calls, &usec); err != nil {
			b.Fatal(err)
		}
		perCall[n] = float64(usec) / float64(calls)
		b.ReportMetric(perCall[n], fmt.Sprintf("server-µs/call-of-%d", n))
	}
	b.ReportMetric((perCall[60]-perCall[20])/40, "server-µs/decision")
}
