package redis

import (
	"context"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// TestBatchDecidesAsOneByOne: a batch (one script call carrying several
// decisions) replies exactly what the same calls made one by one reply, for
// every algorithm, on miniredis and on a real server, at pinned instants.
func TestBatchDecidesAsOneByOne(t *testing.T) {
	mini := miniredis.RunT(t)
	clients := map[string]*goredis.Client{
		"miniredis": goredis.NewClient(&goredis.Options{Addr: mini.Addr()}),
		"redis":     goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr}),
	}
	ctx := context.Background()
	for name, c := range clients {
		t.Cleanup(func() { c.Close() })
		for _, a := range ratelimittest.Algorithms() {
			t.Run(name+"/"+a.Name, func(t *testing.T) {
				clock := ratelimittest.NewClock()
				cfg := a.Config(7, ratelimit.Queue{})
				one, err := New(c, "one-"+a.Name, cfg, WithClock(clock), WithoutRefusalCache(), WithoutCoalescing())
				if err != nil {
					t.Fatal(err)
				}
				batched, _ := New(c, "batched-"+a.Name, cfg, WithClock(clock), WithoutRefusalCache())
				rng := rand.New(rand.NewSource(int64(len(a.Name))))
				decisions := 0
				for round := 0; round < 30; round++ {
					now := clock.Now()
					var batch []*pending
					var want []reply
					for i := 0; i < 2+rng.Intn(7); i++ {
						p := int64(rng.Intn(4))
						r, err := one.call(ctx, now, "a", p, one.tail(one.holderID())...)
						if err != nil {
							t.Fatal(err)
						}
						want = append(want, r)
						args := batched.argv(now, "a", p, batched.tail(batched.holderID()))
						batch = append(batch, &pending{args: args, done: make(chan struct{})})
					}
					batched.batcher.exec(batch)
					for i, p := range batch {
						if p.err != nil {
							t.Fatalf("round %d, decision %d: %v", round, i, p.err)
						}
						got, err := parseReply(p.v)
						if err != nil || got != want[i] {
							t.Fatalf("round %d, decision %d: batched %+v (%v), one by one %+v", round, i, got, err, want[i])
						}
						decisions++
					}
					clock.Advance(time.Duration(rng.Intn(400)) * time.Millisecond)
				}
				if decisions < 100 {
					t.Fatalf("only %d decisions compared", decisions)
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
	b := l.batcher
	b.senders = maxSenders // all busy
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := b.do(ctx, l.argv(clock.Now(), "a", 1, nil))
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
	if l.batcher.senders != 0 {
		t.Fatalf("%d senders left after the calls", l.batcher.senders)
	}
}
