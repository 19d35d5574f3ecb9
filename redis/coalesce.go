package redis

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	goredis "github.com/redis/go-redis/v9"
)

// maxSenders bounds the batches one pipe has in flight at once while no
// full batch waits (beyond it, one more sender per maxBatch calls queued,
// so a slow link does not cap a pipe's decisions per round trip); maxBatch
// bounds the decisions in one batch. Decisions on one server run one after
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
// No caller waits past its own ctx, nor past its limiter's timeout: a
// queued caller selects on its answer and on its ctx, and one timer per
// pipe, set by the earliest deadline of the calls waiting (queued, or in a
// batch in flight), answers each call past its own with
// context.DeadlineExceeded (expire). A context.WithTimeout per queued call
// took 400 of the 1,390 bytes a decision allocated at 64 goroutines on one
// key, and about a tenth of its client time (BenchmarkRedisKeys in the
// bench module, B/decision).
// A lone call's sender, once answered or once its caller left, hands what
// queued meanwhile to a sending goroutine; a caller that queues while a
// sender is free starts one. A batch serves many callers, so it runs on no
// caller's ctx but on the longest timeout of its limiters, and its sender
// moves on at that deadline at the latest: a call stalled on a dead
// connection (which a client that ignores ctx deadlines would wait on for
// its ReadTimeout, or for ever) never holds a sender's place past it, and
// finishes on its own.
type pipe struct {
	client  goredis.UniversalClient
	direct  bool // the client stops a call at its ctx's deadline (honoursDeadlines)
	mu      sync.Mutex
	queue   []*pending
	senders int // batches in flight, or about to be

	flight  map[*pending][]*pending // the batches in flight, by their first call
	timer   *time.Timer             // runs expire
	timerAt time.Time               // when timer fires; zero when it is not set
}

// A job is what a pipe sends: one script decision on keys,
// with the parameters its configuration shares (sent once in a batch for
// the decisions of one configuration, shared) and its own arguments, and
// the timeout that bounds it. A pipe knows nothing else of limiters.
type job struct {
	script  *luaScript
	keys    []string      // the same slice for every decision on these keys
	shared  any           // names the configuration params belongs to
	params  []interface{} // the configuration's parameters, after the head
	own     []interface{} // the decision's own arguments: a head, then its extra
	timeout time.Duration // bounds the call from its start; zero for none
}

// lone is the script call of d alone: ARGV is its head, the parameters,
// then its extra arguments.
func (d *job) lone() evalCall {
	c := d.script.call(d.keys, len(d.own)+len(d.params))
	c.cmd = append(append(append(c.cmd, d.own[:headLen]...), d.params...), d.own[headLen:]...)
	return c
}

type pending struct {
	d        job
	deadline time.Time // d's timeout from the call's start; zero for none
	sent     bool      // taken from the queue; guarded by the pipe's mu

	finished atomic.Bool // answered (finish); v and err are to be read once done is closed
	v        []interface{}
	err      error
	done     chan struct{}
}

// finish answers p, once: the first of its answer and its expiry stands.
func (p *pending) finish(v []interface{}, err error) {
	if p.finished.CompareAndSwap(false, true) {
		p.v, p.err = v, err
		close(p.done)
	}
}

// pipeKey names a pipe: a client, and the slot (Cluster) or tag (other
// multi-node clients) it serves; slot -1 and tag "" for a whole client.
type pipeKey struct {
	client goredis.UniversalClient
	slot   int
	tag    string
}

// The pipes in use. A limiter holds its pipe; the registry holds it weakly,
// so a pipe whose limiters are all gone is collected (once its timer, if
// set, has fired: within the longest timeout), and its entry (which holds
// the client) removed.
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
	p := &pipe{client: client, direct: honoursDeadlines(client)}
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

// do makes d through the pipe, bounded by its timeout from start
// (the call's start on the system clock). A call whose ctx ends (or whose
// timeout passes) while it is queued is dropped from the queue, so it is
// never made; once sent, its answer is lost with the ctx, as with a plain
// script call.
func (b *pipe) do(ctx context.Context, d job, start time.Time) ([]interface{}, error) {
	b.mu.Lock()
	free := b.senders < maxSenders || len(b.queue) >= maxBatch*(b.senders-maxSenders+1)
	if free {
		b.senders++
	}
	if free && len(b.queue) == 0 {
		b.mu.Unlock()
		ctx, cancel := bound(ctx, d.timeout)
		defer cancel()
		return run(ctx, b.client, b.direct, d.lone(), b.handOff)
	}
	p := &pending{d: d, done: make(chan struct{})}
	if d.timeout > 0 {
		p.deadline = start.Add(d.timeout)
		b.watch(p.deadline)
	}
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
		if i := slices.Index(b.queue, p); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
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

// watch makes sure the timer fires by at, a waiting call's deadline.
// Requires b.mu.
func (b *pipe) watch(at time.Time) {
	if !b.timerAt.IsZero() && !at.Before(b.timerAt) {
		return
	}
	b.timerAt = at
	if b.timer == nil {
		b.timer = time.AfterFunc(time.Until(at), b.expire)
	} else {
		b.timer.Reset(time.Until(at))
	}
}

// expire answers every waiting call past its deadline with
// context.DeadlineExceeded (a queued one leaves the queue: it is never
// sent; a sent one's answer, should it come, is dropped), and sets the
// timer for the earliest deadline left.
func (b *pipe) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var next time.Time // the earliest deadline of the calls that still wait
	// due answers p when it waits past its deadline, and reports whether
	// it did.
	due := func(p *pending) bool {
		if p.deadline.IsZero() || p.finished.Load() {
			return false
		}
		if now.Before(p.deadline) {
			if next.IsZero() || p.deadline.Before(next) {
				next = p.deadline
			}
			return false
		}
		p.finish(nil, context.DeadlineExceeded)
		return true
	}
	b.queue = slices.DeleteFunc(b.queue, due)
	for _, batch := range b.flight {
		for _, p := range batch {
			due(p)
		}
	}
	b.timerAt = time.Time{}
	if !next.IsZero() {
		b.watch(next)
	}
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

// next takes the next batch from the queue, answering the calls found past
// their deadline (the timer may run late) rather than sending them; nil,
// and one sender less, when the queue is empty.
func (b *pipe) next() []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	batch := make([]*pending, 0, min(len(b.queue), maxBatch))
	n := 0
	for ; n < len(b.queue) && len(batch) < maxBatch; n++ {
		p := b.queue[n]
		if !p.deadline.IsZero() && !now.Before(p.deadline) {
			p.finish(nil, context.DeadlineExceeded)
			continue
		}
		p.sent = true
		batch = append(batch, p)
	}
	clear(b.queue[:n]) // the queue's array keeps no answered call
	b.queue = b.queue[n:]
	if len(batch) == 0 {
		b.senders--
		return nil
	}
	if b.flight == nil {
		b.flight = map[*pending][]*pending{}
	}
	b.flight[batch[0]] = batch
	return batch
}

// landed ends the flight of batch, once it is answered.
func (b *pipe) landed(batch []*pending) {
	b.mu.Lock()
	delete(b.flight, batch[0])
	b.mu.Unlock()
}

// evalCall is one script call: its script, and its command (see
// luaScript.call).
type evalCall struct {
	script *luaScript
	cmd    []interface{}
}

// run makes the call, and again with the script's source (EVAL, which
// loads it) when the server lacks it.
func (c evalCall) run(ctx context.Context, client goredis.UniversalClient) *goredis.Cmd {
	cmd := command(ctx, c.cmd)
	client.Process(ctx, cmd)
	if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = command(ctx, c.withSource())
		client.Process(ctx, cmd)
	}
	return cmd
}

// command is the go-redis command of args, a script call's (EVALSHA or
// EVAL): its first key, if it has keys, is its fourth argument, as
// go-redis's own EvalSha says (a Cluster or a Ring routes by it).
func command(ctx context.Context, args []interface{}) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx, args...)
	if len(args) > 3 && args[2] != 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// withSource is c's command as EVAL with the script's source.
func (c evalCall) withSource() []interface{} {
	cmd := slices.Clone(c.cmd)
	cmd[0], cmd[1] = "eval", c.script.src
	return cmd
}

// evalAll makes calls in one pipelined round trip and returns each one's
// answer; a call whose script the server lacks runs again with EVAL, which
// loads it.
func evalAll(ctx context.Context, client goredis.UniversalClient, calls []evalCall) []result {
	pipe := client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = command(ctx, c.cmd)
		pipe.Process(ctx, cmds[i])
	}
	pipe.Exec(ctx) // each command carries its own error
	out := make([]result, len(calls))
	for i, c := range calls {
		out[i].v, out[i].err = cmds[i].Slice()
		if out[i].err != nil && goredis.HasErrorPrefix(out[i].err, "NOSCRIPT") {
			cmd := command(ctx, c.withSource())
			client.Process(ctx, cmd)
			out[i].v, out[i].err = cmd.Slice()
		}
	}
	return out
}

// scriptCall is one script call of a batch: the decisions of the batch's
// limiters that run this script, in the order of its replies.
type scriptCall struct {
	evalCall
	calls  []*pending
	want   struct{ args, keys, calls int } // the sizes of ARGV, the keys and calls, which group counts first
	placed int                             // the keys group has placed in the command
}

// exec sends the batch (see send), and returns once it is answered or
// after the longest timeout of its limiters, whichever comes first: a send
// may wait far longer on a stalled connection (a client that ignores ctx
// deadlines, a limiter without a timeout), and the sender's place is not
// held meanwhile.
func (b *pipe) exec(batch []*pending) {
	ctx, cancel, hold := batchBounds(batch)
	defer cancel()
	if hold == 0 || (b.direct && ctx.Done() != nil) {
		b.send(ctx, batch) // nothing bounds it, or the client itself stops at the deadline
		return
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		b.send(ctx, batch)
	}()
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-sent:
	case <-t.C: // the send finishes on its own; its callers wait on their own ctx
	}
}

// send makes the batch's script calls: one per script, which makes its
// decisions one after another (see batch.lua), so the server reads the
// time and runs a script once per script and batch, not once per decision;
// the script calls in one pipelined round trip.
func (b *pipe) send(ctx context.Context, batch []*pending) {
	defer b.landed(batch)
	if len(batch) == 1 {
		p := batch[0]
		p.finish(p.d.lone().run(ctx, b.client).Slice())
		return
	}
	calls := group(batch)
	if len(calls) == 1 {
		c := calls[0]
		c.answer(c.run(ctx, b.client).Slice())
		return
	}
	evals := make([]evalCall, len(calls))
	for i, c := range calls {
		evals[i] = c.evalCall
	}
	for i, r := range evalAll(ctx, b.client, evals) {
		calls[i].answer(r.v, r.err)
	}
}

// batchBounds returns the ctx a batch is sent on, bounded by the longest
// timeout of its decisions, or by none when one of them has none
// (WithTimeout of zero removes the bound: its call must not fail at
// another's timeout),
// and hold, how long its sender waits for it at most: the longest timeout
// (zero: none has one).
func batchBounds(batch []*pending) (ctx context.Context, cancel context.CancelFunc, hold time.Duration) {
	unbounded := false
	for _, p := range batch {
		if p.d.timeout <= 0 {
			unbounded = true
		}
		hold = max(hold, p.d.timeout)
	}
	if unbounded || hold == 0 {
		return context.Background(), func() {}, hold
	}
	ctx, cancel = context.WithTimeout(context.Background(), hold)
	return ctx, cancel, hold
}

// group makes the script calls of a batch, as batch.lua reads them: per
// script, per shared configuration (the decisions of one Factory's
// limiters share their parameters, sent once: the first decision's), per
// keys (a limiter's) those keys and their decisions, each in the order of
// its first decision.
func group(batch []*pending) []*scriptCall {
	onKeys, byKeys := groupInOrder(batch, func(p *pending) *string { return &p.d.keys[0] })
	shared, byShared := groupInOrder(onKeys, func(k *string) any { return byKeys[k][0].d.shared })
	var calls []*scriptCall
	byScript := map[*luaScript]*scriptCall{}
	for _, sh := range shared {
		first := &byKeys[byShared[sh][0]][0].d
		c := byScript[first.script]
		if c == nil {
			c = &scriptCall{evalCall: evalCall{script: first.script}}
			byScript[first.script] = c
			calls = append(calls, c)
		}
		// The sizes of c's command and calls, each then allocated once:
		// grown by appending, they cost a decision about 150 more bytes
		// (BenchmarkRedisKeys in the bench module, B/decision, one key).
		c.want.args += 2 + len(first.params)
		for _, k := range byShared[sh] {
			c.want.args += 2
			c.want.keys += len(byKeys[k][0].d.keys)
			for _, p := range byKeys[k] {
				c.want.args += 1 + len(p.d.own)
				c.want.calls++
			}
		}
	}
	for _, c := range calls {
		// The command's keys, placed below, come before ARGV.
		c.evalCall = c.script.call(nil, c.want.keys+2+c.want.args)
		c.cmd[2] = c.want.keys
		c.cmd = append(c.cmd[:3+c.want.keys], "batch", headLen)
		c.calls = make([]*pending, 0, c.want.calls)
	}
	for _, sh := range shared {
		first := &byKeys[byShared[sh][0]][0].d
		c := byScript[first.script]
		c.cmd = append(append(c.cmd, len(first.params)), first.params...)
		c.cmd = append(c.cmd, len(byShared[sh]))
		for _, k := range byShared[sh] {
			own := byKeys[k]
			keys := own[0].d.keys
			for _, key := range keys {
				c.cmd[3+c.placed] = key
				c.placed++
			}
			c.cmd = append(c.cmd, len(keys), len(own))
			for _, p := range own {
				c.cmd = append(append(c.cmd, len(p.d.own)), p.d.own...)
			}
			c.calls = append(c.calls, own...)
		}
	}
	return calls
}

// groupInOrder groups xs by key: the keys in the order of their first
// element, and each key's elements in their order in xs.
func groupInOrder[K comparable, X any](xs []X, key func(X) K) ([]K, map[K][]X) {
	var keys []K
	groups := map[K][]X{}
	for _, x := range xs {
		k := key(x)
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], x)
	}
	return keys, groups
}

// answer hands each decision its reply, or its error: the call's, or the
// decision's own (batch.lua replies a failed decision's error in its place).
func (c *scriptCall) answer(v []interface{}, err error) {
	if err == nil && len(v) != len(c.calls) {
		err = fmt.Errorf("redis: batch of %d decisions got %d replies", len(c.calls), len(v))
	}
	for i, p := range c.calls {
		if err != nil {
			p.finish(nil, err)
			continue
		}
		switch r := v[i].(type) {
		case []interface{}:
			p.finish(r, nil)
		case error:
			p.finish(nil, r)
		default:
			p.finish(nil, fmt.Errorf("redis: batch reply %d has type %T", i, v[i]))
		}
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
