package redis

import (
	"context"
	"fmt"
	"sync"
)

// maxSenders bounds the batches one limiter has in flight at once; maxBatch
// the decisions in one batch. One limiter's decisions run one after another
// on the server anyway: measured with 16 and 64 goroutines on one key, two
// batches in flight gave the most decisions per second and the lowest p99
// (8 gave 25% fewer decisions and a p99 50% higher; 1 gave 10% fewer at 16
// goroutines).
const maxSenders, maxBatch = 2, 64

// batcher sends concurrent decisions of one limiter in batches, each one
// script call. There is no linger: a call that finds the queue empty and a
// sender free goes at once, alone and on its caller's ctx, as without
// coalescing. Calls arriving while maxSenders batches are in flight wait in
// the queue, and leave together as soon as a sender is free.
//
// No caller waits on a script call past its own ctx (which carries the
// limiter's timeout, see call): the calls run in goroutines, and each caller
// selects on its answer and on its ctx. A lone call's goroutine, once
// answered, hands what queued meanwhile to a sending goroutine; a caller
// that queues while a sender is free starts one. A batch serves many callers, so it
// runs on no caller's ctx but on the limiter's timeout; a call left behind
// by its caller finishes on its own, when the server answers or the client's
// own timeouts fire.
type batcher struct {
	l       *Limiter
	mu      sync.Mutex
	queue   []*pending
	senders int // batches in flight, or about to be
}

type pending struct {
	args []interface{}
	v    []interface{}
	err  error
	sent bool // taken from the queue; guarded by the batcher's mu
	done chan struct{}
}

// do runs one script call through the batcher. A call whose ctx ends while
// it is queued is dropped from the queue, so it is never made; once sent,
// its answer is lost with the ctx, as with a plain script call.
func (b *batcher) do(ctx context.Context, args []interface{}) ([]interface{}, error) {
	b.mu.Lock()
	free := b.senders < maxSenders
	if free {
		b.senders++
	}
	if free && len(b.queue) == 0 {
		b.mu.Unlock()
		return b.l.run(ctx, args, b.handOff)
	}
	p := &pending{args: args, done: make(chan struct{})}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	if free {
		go b.drain()
	}
	select {
	case <-p.done:
		return p.v, p.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !p.sent {
		for i, q := range b.queue {
			if q == p {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	b.mu.Unlock()
	select {
	case <-p.done: // answered meanwhile: the answer beats the ctx error
		return p.v, p.err
	default:
	}
	return nil, ctx.Err()
}

// handOff is a sender's last step: what is still queued goes to a goroutine
// that keeps the sender's place.
func (b *batcher) handOff() {
	b.mu.Lock()
	idle := len(b.queue) == 0
	if idle {
		b.senders--
	}
	b.mu.Unlock()
	if !idle {
		go b.drain()
	}
}

// drain sends batches until the queue is empty, then gives up its sender's
// place.
func (b *batcher) drain() {
	for batch := b.next(); batch != nil; batch = b.next() {
		b.exec(batch)
	}
}

// next takes the next batch from the queue; nil, and one sender less, when
// the queue is empty.
func (b *batcher) next() []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.senders--
		return nil
	}
	n := min(len(b.queue), maxBatch)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	for _, p := range batch {
		p.sent = true
	}
	return batch
}

// exec sends the batch as one script call: the script makes the decisions
// one after another (see batch.lua), so the server reads the time and runs
// a script once per batch, not once per decision.
func (b *batcher) exec(batch []*pending) {
	l := b.l
	ctx := context.Background() // a batch serves many callers: none's ctx
	if l.o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.o.timeout)
		defer cancel()
	}
	if len(batch) == 1 {
		p := batch[0]
		p.v, p.err = l.script.Run(ctx, l.client, l.keys, p.args...).Slice()
		close(p.done)
		return
	}
	// The parameters every decision of this limiter shares go once, after
	// the head of now, permits and op; then each decision sends its own
	// head and extra arguments.
	head, np := l.headLen(), len(l.args)
	args := make([]interface{}, 0, 3+np+len(batch)*(1+head))
	args = append(append(args, "batch", head, np), l.args...)
	for _, p := range batch {
		args = append(append(append(args, len(p.args)-np), p.args[:head]...), p.args[head+np:]...)
	}
	v, err := l.script.Run(ctx, l.client, l.keys, args...).Slice()
	if err == nil && len(v) != len(batch) {
		err = fmt.Errorf("redis: batch of %d decisions got %d replies", len(batch), len(v))
	}
	for i, p := range batch {
		if p.err = err; err == nil {
			if p.v, _ = v[i].([]interface{}); p.v == nil {
				p.err = fmt.Errorf("redis: batch reply %d has type %T", i, v[i])
			}
		}
		close(p.done)
	}
}
