package redis

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	goredis "github.com/redis/go-redis/v9"
)

// maxSenders bounds the batches one pipe has in flight at once; maxBatch
// the decisions in one batch. Decisions on one server run one after
// another anyway: measured with 16 and 64 goroutines on one key, two
// batches in flight gave the most decisions per second and the lowest p99
// (8 gave 25% fewer decisions and a p99 50% higher; 1 gave 10% fewer at 16
// goroutines); at 64 goroutines over 10,000 keys, 4 did no better than 2
// (BenchmarkRedisKeys in the bench module).
const maxSenders, maxBatch = 2, 64

// A pipe sends the concurrent decisions of every limiter that shares its
// target in batches: a single-node client's server (one pipe per client,
// whatever the keys), one hash slot of a Cluster (so that one slot's batch
// never waits behind another's, and a batch's keys may share one script
// call), or one hash tag on any other client (a Ring shards by tag).
//
// There is no linger: a call that finds the queue empty and a sender free
// goes at once, alone and on its caller's ctx, as without coalescing. Calls
// arriving while maxSenders batches are in flight wait in the queue, and
// leave together as soon as a sender is free: the decisions of one script
// (algorithm) in one script call, the calls of several scripts in one
// pipelined round trip.
//
// No caller waits past its own ctx (which carries the limiter's timeout,
// see Limiter.call): a queued caller selects on its answer and on its ctx.
// A lone call's sender, once answered, hands what queued meanwhile to a
// sending goroutine; a caller that queues while a sender is free starts
// one. A batch serves many callers, so it runs on no caller's ctx but on
// its limiters' timeout; a batch whose callers all left finishes on its
// own, when the server answers or that timeout (or, when the client
// ignores ctx deadlines, its own timeouts) fires.
type pipe struct {
	client  goredis.UniversalClient
	mu      sync.Mutex
	queue   []*pending
	senders int // batches in flight, or about to be
}

type pending struct {
	l    *Limiter
	args []interface{}
	v    []interface{}
	err  error
	sent bool // taken from the queue; guarded by the pipe's mu
	done chan struct{}
}

// pipeKey names a pipe: a client, and the slot (Cluster) or tag (other
// multi-node clients) it serves; slot -1 and tag "" for a whole client.
type pipeKey struct {
	client goredis.UniversalClient
	slot   int
	tag    string
}

// The pipes in use. A limiter holds its pipe; the registry holds it weakly,
// so a pipe whose limiters are all gone is collected, and its entry (which
// holds the client) removed.
var (
	pipesMu sync.Mutex
	pipes   = map[pipeKey]weak.Pointer[pipe]{}
)

// pipeFor returns the pipe of the target of keys on client.
func pipeFor(client goredis.UniversalClient, keys []string) *pipe {
	k := pipeKey{client: client, slot: -1}
	switch client.(type) {
	case *goredis.Client: // one server (a Sentinel's failover client too)
	case *goredis.ClusterClient:
		k.slot = keySlot(keys[0])
	default:
		k.tag = hashTag(keys[0])
	}
	pipesMu.Lock()
	defer pipesMu.Unlock()
	if p := pipes[k].Value(); p != nil {
		return p
	}
	p := &pipe{client: client}
	pipes[k] = weak.Make(p)
	runtime.AddCleanup(p, forgetPipe, k)
	return p
}

// forgetPipe removes the entry of a collected pipe.
func forgetPipe(k pipeKey) {
	pipesMu.Lock()
	defer pipesMu.Unlock()
	if pipes[k].Value() == nil {
		delete(pipes, k)
	}
}

// do runs one of l's script calls through the pipe. A call whose ctx ends
// while it is queued is dropped from the queue, so it is never made; once
// sent, its answer is lost with the ctx, as with a plain script call.
func (b *pipe) do(ctx context.Context, l *Limiter, args []interface{}) ([]interface{}, error) {
	b.mu.Lock()
	free := b.senders < maxSenders
	if free {
		b.senders++
	}
	if free && len(b.queue) == 0 {
		b.mu.Unlock()
		return l.run(ctx, args, b.handOff)
	}
	p := &pending{l: l, args: args, done: make(chan struct{})}
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
func (b *pipe) handOff() {
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
func (b *pipe) drain() {
	for batch := b.next(); batch != nil; batch = b.next() {
		b.exec(batch)
	}
}

// next takes the next batch from the queue; nil, and one sender less, when
// the queue is empty.
func (b *pipe) next() []*pending {
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

// scriptCall is one script call of a batch: the decisions of the batch's
// limiters that run this script, in the order of its replies.
type scriptCall struct {
	script *goredis.Script
	keys   []string
	args   []interface{}
	calls  []*pending
}

// exec sends the batch: one script call per script, which makes its
// decisions one after another (see batch.lua), so the server reads the
// time and runs a script once per script and batch, not once per decision;
// the script calls in one pipelined round trip.
func (b *pipe) exec(batch []*pending) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	if len(batch) == 1 {
		p := batch[0]
		p.v, p.err = p.l.script.Run(ctx, p.l.client, p.l.keys, p.args...).Slice()
		close(p.done)
		return
	}
	calls := group(batch)
	if len(calls) == 1 {
		c := calls[0]
		c.answer(c.script.Run(ctx, b.client, c.keys, c.args...).Slice())
		return
	}
	pipe := b.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	pipe.Exec(ctx) // each command carries its own error
	for i, c := range calls {
		v, err := cmds[i].Slice()
		if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = c.script.Run(ctx, b.client, c.keys, c.args...).Slice() // loads the script
		}
		c.answer(v, err)
	}
}

// batchContext bounds a batch by the longest timeout of its limiters; by
// none when one of them has none.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var d time.Duration
	for _, p := range batch {
		if p.l.o.timeout <= 0 {
			return context.Background(), func() {}
		}
		d = max(d, p.l.o.timeout)
	}
	return context.WithTimeout(context.Background(), d)
}

// group makes the script calls of a batch: per script, per limiter (in the
// order of their first decision) its keys, parameters and decisions, as
// batch.lua reads them.
func group(batch []*pending) []*scriptCall {
	byLimiter := map[*Limiter][]*pending{}
	var limiters []*Limiter
	for _, p := range batch {
		if byLimiter[p.l] == nil {
			limiters = append(limiters, p.l)
		}
		byLimiter[p.l] = append(byLimiter[p.l], p)
	}
	var calls []*scriptCall
	byScript := map[*goredis.Script]*scriptCall{}
	for _, l := range limiters {
		c := byScript[l.script]
		if c == nil {
			c = &scriptCall{script: l.script, args: []interface{}{"batch", l.headLen()}}
			byScript[l.script] = c
			calls = append(calls, c)
		}
		own := byLimiter[l]
		head, np := l.headLen(), len(l.args)
		c.keys = append(c.keys, l.keys...)
		c.args = append(append(c.args, len(l.keys), np), l.args...)
		c.args = append(c.args, len(own))
		for _, p := range own {
			c.args = append(append(append(c.args, len(p.args)-np), p.args[:head]...), p.args[head+np:]...)
		}
		c.calls = append(c.calls, own...)
	}
	return calls
}

// answer hands each decision its reply, or the call's error.
func (c *scriptCall) answer(v []interface{}, err error) {
	if err == nil && len(v) != len(c.calls) {
		err = fmt.Errorf("redis: batch of %d decisions got %d replies", len(c.calls), len(v))
	}
	for i, p := range c.calls {
		if p.err = err; err == nil {
			if p.v, _ = v[i].([]interface{}); p.v == nil {
				p.err = fmt.Errorf("redis: batch reply %d has type %T", i, v[i])
			}
		}
		close(p.done)
	}
}

// hashTag is the part of key that Redis hashes: what is between its first
// "{" and the first "}" after it, when that is not empty; the whole key
// otherwise.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// keySlot is the Cluster hash slot of key: CRC16 (XMODEM) of its hash tag,
// modulo 16384.
func keySlot(key string) int {
	var crc uint16
	for _, c := range []byte(hashTag(key)) {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
