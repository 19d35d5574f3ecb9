package redis

import (
	"context"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// maxSenders bounds the pipelines one limiter has in flight at once; maxBatch
// the decisions in one pipeline.
const maxSenders, maxBatch = 8, 64

// batcher sends concurrent decisions of one limiter as pipelined batches.
// There is no linger: a caller that finds a sender free sends its own call
// at once (alone, if nobody else is waiting); calls arriving meanwhile wait
// in the queue and leave together as soon as a sender is free. A sender
// that finds more calls queued after its batch hands them to a new sender
// goroutine, which exits when the queue is empty.
type batcher struct {
	l       *Limiter
	mu      sync.Mutex
	queue   []*pending
	senders int
}

type pending struct {
	args []interface{}
	v    []interface{}
	err  error
	done chan struct{}
}

// do runs one script call through the batcher.
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
		b.send() // this caller's batch, its own call included
	}
	select {
	case <-p.done:
		return p.v, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends one batch, then leaves what is queued to another sender.
func (b *batcher) send() {
	b.mu.Lock()
	n := min(len(b.queue), maxBatch)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	more := len(b.queue) > 0
	if !more {
		b.senders--
	}
	b.mu.Unlock()
	if more {
		go b.drain()
	}
	b.exec(batch)
}

func (b *batcher) drain() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.senders--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), maxBatch)
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.exec(batch)
	}
}

// exec pipelines the batch's EVALSHAs; calls whose script was not cached
// (NOSCRIPT) are run again with EVAL.
func (b *batcher) exec(batch []*pending) {
	l := b.l
	ctx := context.Background()
	if l.o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.o.timeout)
		defer cancel()
	}
	var cmds []*goredis.Cmd
	if len(batch) == 1 {
		p := batch[0]
		p.v, p.err = l.script.Run(ctx, l.client, l.keys, p.args...).Slice()
		close(p.done)
		return
	}
	pipe := l.client.Pipeline()
	for _, p := range batch {
		cmds = append(cmds, l.script.EvalSha(ctx, pipe, l.keys, p.args...))
	}
	pipe.Exec(ctx) // errors are read per command
	for i, p := range batch {
		p.v, p.err = cmds[i].Slice()
		if p.err != nil && strings.HasPrefix(p.err.Error(), "NOSCRIPT") {
			p.v, p.err = l.script.Run(ctx, l.client, l.keys, p.args...).Slice()
		}
		close(p.done)
	}
}
