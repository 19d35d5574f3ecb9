package redis

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitkit/ratelimit"
	goredis "github.com/redis/go-redis/v9"
)

// The scripts' parts: prelude.lua, one .lua file or two per algorithm
// (named by its descriptor, see algo.Redis.Lua), and batch.lua.
//
//go:embed *.lua
var luaFiles embed.FS

var (
	prelude  = lua("prelude")
	batchLua = lua("batch")
	scripts  sync.Map // the parts joined by "+" -> *luaScript
)

// lua is the source of the part called name ("" when there is none).
func lua(name string) string {
	b, _ := luaFiles.ReadFile(name + ".lua")
	return string(b)
}

// scriptOf composes, once, the script of an algorithm made of parts: the
// protocol's names (protocolLua), the prelude, the parts, which define decide(K, ARGV) for one decision on the
// keys K, and batch.lua, which calls it once or for each decision of a
// batch (see coalesce.go).
func scriptOf(parts []string) (*luaScript, error) {
	name := strings.Join(parts, "+")
	if s, ok := scripts.Load(name); ok {
		return s.(*luaScript), nil
	}
	var src strings.Builder
	src.WriteString(protocolLua)
	src.WriteString(prelude)
	for _, p := range parts {
		l := lua(p)
		if l == "" {
			return nil, fmt.Errorf("%w: redis: no script %s.lua", ratelimit.ErrInvalidConfig, p)
		}
		src.WriteString(l)
	}
	src.WriteString(batchLua)
	h := sha1.Sum([]byte(src.String()))
	s, _ := scripts.LoadOrStore(name, &luaScript{src: src.String(), hash: hex.EncodeToString(h[:])})
	return s.(*luaScript), nil
}

// A luaScript is called by its SHA1 digest (EVALSHA), and with its source
// (EVAL, which loads it) when the server lacks it.
type luaScript struct{ src, hash string }

// call starts a call of s on keys: the command EVALSHA, the digest and the
// keys, with room for argc arguments (ARGV) to be appended. The command is
// built whole here, where go-redis's EvalSha would copy the arguments into
// a command of its own: a decision allocated 750 bytes at 64 goroutines on
// one key, 653 so (BenchmarkRedisKeys in the bench module, B/decision).
func (s *luaScript) call(keys []string, argc int) evalCall {
	cmd := make([]interface{}, 0, 3+len(keys)+argc)
	cmd = append(cmd, "evalsha", s.hash, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return evalCall{script: s, cmd: cmd}
}

// The script protocol, in one place. A call's ARGV is now (empty: the
// server's TIME), permits, an op, the algorithm's parameters (see
// NewFactory), the arguments it computes for each call from the caller's
// clock (algo.Redis.PerCall; a calendar quota's period boundaries), then
// the op's arguments; every script replies with the
// numbers of reply. Ops: opAcquire (every algorithm; permits 0 is a status
// check; concurrency: the holder's name), opWait (token bucket: acquire or
// reserve; the most us the caller can wait, -1 for no bound), opCancel
// (token bucket: give back a cancelled reservation; its due instant and
// prior), opRefund (rate algorithms: take back a grant; its instant),
// opCharge (rate algorithms: take permits without refusing, a settlement's
// excess), opRelease and opRenew (concurrency: the holder's name). A
// refused reservation's reply says refusedQueueFull or refusedDeadline.
const (
	opAcquire = "a"
	opWait    = "w"
	opCancel  = "f"
	opRefund  = "u"
	opCharge  = "c"
	opRelease = "r"
	opRenew   = "n"

	refusedQueueFull = 2
	refusedDeadline  = 3

	// errClockFar starts the error a script raises when the caller's
	// clock is too far from Redis's for the arguments it computed (a
	// calendar quota's period boundaries): a lasting condition, not an
	// outage (see fail).
	errClockFar = "limitkit: the caller's clock is too far from the server's"
)

// protocolLua declares the protocol's names for the scripts, before the
// prelude of every script, so that the ops and refusal codes above are
// written once.
var protocolLua = fmt.Sprintf(`-- The script protocol, declared by the redis package's script.go.
local OP_ACQUIRE, OP_WAIT, OP_CANCEL, OP_REFUND, OP_RELEASE, OP_RENEW = '%s', '%s', '%s', '%s', '%s', '%s'
local OP_CHARGE = '%s'
local REFUSED_QUEUE_FULL, REFUSED_DEADLINE = %d, %d
local ERR_CLOCK_FAR = %q
`, opAcquire, opWait, opCancel, opRefund, opRelease, opRenew, opCharge, refusedQueueFull, refusedDeadline, errClockFar)

// reply is what every script returns. Durations travel in microseconds.
type reply struct {
	granted    bool
	remaining  int64
	retryAfter time.Duration // negative: unknown; for a reservation, its wait
	resetAfter time.Duration
	// The script's fifth number is read by the outcome it tells of, into
	// one of these fields (the others stay 0):
	at      int64 // a rate grant's: the instant (us) it was counted at; a reservation's, its due instant
	refusal int64 // a refused reservation's: refusedQueueFull or refusedDeadline
	prior   int64 // a reservation's: the due instant (us) of the one before it
}

// localNow is this process's time: for IdleFor and sleeping, never for decisions.
func (l *Limiter) localNow() time.Time {
	if l.o.clock != nil {
		return l.o.clock.Now()
	}
	return time.Now()
}

// call runs the script once at the local instant local (read by the caller,
// which may need it too): ARGV is now, permits, op, params, extra.
func (l *Limiter) call(ctx context.Context, local time.Time, op string, permits int64, extra ...interface{}) (reply, error) {
	l.used.Store(local.UnixNano())
	own := l.own(local, op, permits, extra)
	var v []interface{}
	var err error
	if l.pipe != nil {
		start := local // the call's start on the system clock, which bounds it
		if l.o.clock != nil {
			start = time.Now()
		}
		v, err = l.pipe.do(ctx, l.job(own), start) // bounds the call by the timeout itself
	} else {
		ctx, cancel := l.bound(ctx)
		defer cancel()
		v, err = run(ctx, l.client, l.direct, l.lone(own), nil)
	}
	if err != nil {
		return reply{}, err
	}
	return parseReply(v)
}

// bound returns ctx bounded by the limiter's timeout (see WithTimeout).
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return bound(ctx, l.o.timeout)
}

// bound returns ctx bounded by timeout; not bounded when it is zero.
func bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

type result struct {
	v   []interface{}
	err error
}

// run makes one script call on client, on ctx, and returns its answer, or
// ctx's error once ctx ends, whatever the client's options. When the
// client bounds a call by its ctx's deadline (direct: see
// honoursDeadlines) and ctx has one, or
// when ctx can never end, the call runs on the caller's goroutine: a
// cancellation is then seen before the call leaves and when its answer
// arrives, and the deadline bounds the wait. Otherwise it runs in a
// goroutine the caller does not wait on past ctx, which finishes on its own
// when the server answers or the client's own timeouts fire; that costs a
// goroutine switch per call (BenchmarkRedisLone in the bench module). then
// (nil: nothing) runs once: when the call is answered, before the answer is
// handed over, or when the caller stops waiting, if that comes first (a
// stalled call holds nothing of the pipe's).
func run(ctx context.Context, client goredis.UniversalClient, direct bool, call evalCall, then func()) ([]interface{}, error) {
	_, deadline := ctx.Deadline()
	if ctx.Done() == nil || (direct && deadline) {
		v, err := call.run(ctx, client).Slice()
		if then != nil {
			then()
		}
		if err != nil && ended(ctx) != nil {
			err = ended(ctx) // the deadline, whatever error the socket's gave
		}
		return v, err
	}
	if then != nil {
		then = sync.OnceFunc(then) // the call's goroutine and the caller may both run it
	}
	ch := make(chan result, 1)
	go func() {
		v, err := call.run(ctx, client).Slice()
		if then != nil {
			then()
		}
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if then != nil {
			then() // a stalled call holds nothing of the pipe's
		}
		select {
		case r := <-ch: // answered meanwhile: the answer beats the ctx error
			return r.v, r.err
		default:
		}
		return nil, ctx.Err()
	}
}

// own is a decision's own script arguments: its head, now (empty: the
// server's TIME; the local instant with WithClock), permits and op, then
// the arguments its algorithm computes from local (algo.Redis.PerCall),
// then extra. A batch sends them with the parameters of the decisions'
// Factory once (see group); lone makes a call of one decision of them.
func (l *Limiter) own(local time.Time, op string, permits int64, extra []interface{}) []interface{} {
	now := ""
	if l.o.pin {
		now = strconv.FormatInt(local.UnixMicro(), 10)
	}
	var timed []interface{}
	if f := l.params().perCall; f != nil {
		timed = f(local)
	}
	out := append(make([]interface{}, 0, headLen+len(timed)+len(extra)), now, permits, op)
	return append(append(out, timed...), extra...)
}

// job is the decision of the limiter whose own arguments are own, as a
// pipe sends it.
func (l *Limiter) job(own []interface{}) job {
	return job{script: l.script, keys: l.keys, shared: l.shape, params: l.params().args, own: own, timeout: l.o.timeout}
}

// lone is the script call of one decision of the limiter, whose own
// arguments are own (see decision.lone).
func (l *Limiter) lone(own []interface{}) evalCall {
	d := l.job(own)
	return d.lone()
}

// headLen is the number of arguments of a decision's head.
const headLen = 3

func parseReply(v []interface{}) (reply, error) {
	if len(v) != 6 {
		return reply{}, fmt.Errorf("redis: script replied %d values, want 6", len(v))
	}
	var n [6]int64
	for i, x := range v {
		switch x := x.(type) {
		case int64:
			n[i] = x
		case string:
			var err error
			if n[i], err = strconv.ParseInt(x, 10, 64); err != nil {
				return reply{}, fmt.Errorf("redis: script reply %d: %w", i, err)
			}
		default:
			return reply{}, fmt.Errorf("redis: script reply %d has type %T", i, x)
		}
	}
	r := reply{granted: n[0] == 1, remaining: n[1], retryAfter: -1, resetAfter: time.Duration(n[3]) * time.Microsecond, prior: n[5]}
	if r.granted {
		r.at = n[4]
	} else {
		r.refusal = n[4]
	}
	if n[2] >= 0 {
		r.retryAfter = time.Duration(n[2]) * time.Microsecond
	}
	return r, nil
}
