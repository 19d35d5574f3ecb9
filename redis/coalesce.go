package redis

import (
	"context"
	"fmt"
	"sync"
)

// maxSenders bounds the batches one limiter has in flight at once; maxBatch
// the decisions in one batch.
const maxSenders, maxBatch = 8, 64

// batcher sends concurrent decisions of one limiter in batches, each one
// script call. There is no linger: a caller that finds fewer than maxSenders
// batches in flight becomes a sender and sends what is queued at once (its
// own call alone, if nobody else waits). Calls arriving while maxSenders
// batches are in flight wait in the queue, and leave together as soon as a
// sender is free. A sender whose own call is answered hands what is still
// queued to a goroutine, which sends it and exits when the queue is empty.
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
	p := &pending{args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	lead := b.senders < maxSenders
	if lead {
		b.senders++
	}
	b.mu.Unlock()
	if lead {
		b.send(ctx, p)
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
	return nil, ctx.Err()
}

// send sends batches until own is answered, then leaves the queue to drain.
// A batch of own alone is sent with own's ctx, as without coalescing.
func (b *batcher) send(ctx context.Context, own *pending) {
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		if len(batch) == 1 && batch[0] == own {
			b.exec(ctx, batch)
		} else {
			b.exec(context.Background(), batch)
		}
		select {
		case <-own.done:
			b.mu.Lock()
			idle := len(b.queue) == 0
			if idle {
				b.senders--
			}
			b.mu.Unlock()
			if !idle {
				go b.drain()
			}
			return
		default:
		}
	}
}

func (b *batcher) drain() {
	for batch := b.next(); batch != nil; batch = b.next() {
		b.exec(context.Background(), batch)
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
func (b *batcher) exec(ctx context.Context, batch []*pending) {
	l := b.l
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
	args := []interface{}{"batch"}
	for _, p := range batch {
		args = append(append(args, len(p.args)), p.args...)
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
