package hotkey

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts: lease.lua, the algorithm's file, then run.lua.
//
//go:embed *.lua
var luaFiles embed.FS

// scriptOf composes the script of an algorithm's file.
func scriptOf(algorithm string) *goredis.Script {
	var src []byte
	for _, name := range []string{"lease", algorithm, "run"} {
		b, err := luaFiles.ReadFile(name + ".lua")
		if err != nil {
			panic("hotkey: " + err.Error()) // embedded: cannot happen
		}
		src = append(src, b...)
	}
	return goredis.NewScript(string(src))
}

var scripts = map[string]*goredis.Script{
	"tokenbucket": scriptOf("tokenbucket"),
	"fixedwindow": scriptOf("fixedwindow"),
	"slidinglog":  scriptOf("slidinglog"),
}

// The ops of a script call (see lease.lua).
const (
	opTake = "take" // decide p permits, and debit a lease
	opGive = "give" // give a lease back only
	opPeek = "peek" // a status check: is one permit available?
)

// giveBack is a lease given back in a call: its id, its permits h, its
// expiry on the script's clock (us) and the permits never spent.
type giveBack struct {
	id      string
	h, e, u int64
}

// reply is what the script returns (durations in us on the script's
// clock, made durations here).
type reply struct {
	granted    bool
	k          int64         // permits debited: p, plus the lease's
	valid      time.Duration // the lease's validity from the script's now; 0: no lease
	e          int64         // the lease's expiry, us on the script's clock
	remaining  int64         // available in Redis after the call
	retryAfter time.Duration // negative: unknown
	resetAfter time.Duration
}

// call runs one script call: op for p permits (want: the permits the
// process asks for, p included; id: the new lease's), giving g back
// (g.id empty: none), at the local instant sent (the script's time when
// WithClock pins it). It returns within the limiter's timeout whatever
// the client's options: the call runs on a goroutine of its own, and an
// answer that comes later is dropped (what it debited is lost until its
// expiry, as a lease of a crashed process is).
func (l *Limiter) call(op string, p, want int64, id string, g giveBack, sent time.Time) (reply, error) {
	now := ""
	if l.o.clock != nil {
		if l.lag != nil {
			l.lag() // the call's way to Redis: the script runs later than sent
		}
		now = strconv.FormatInt(l.o.clock.Now().UnixMicro(), 10)
	}
	args := make([]interface{}, 0, 12+len(l.params))
	args = append(args, now, op, p, want, l.expiryUS, l.minValidUS, l.maxHeld, id, g.id, g.h, g.e, g.u)
	args = append(args, l.params...)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if l.o.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, l.o.timeout)
	}
	defer cancel()
	type result struct {
		v   []interface{}
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := l.script.Run(ctx, l.client, l.keys, args...).Slice()
		ch <- result{v, err}
	}()
	l.calls.Add(1)
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		select {
		case r = <-ch:
		default:
			r.err = ctx.Err()
		}
	}
	if l.lag != nil && l.o.clock != nil {
		l.lag() // the answer's way back
	}
	if r.err != nil {
		return reply{}, r.err
	}
	return parseReply(r.v)
}

func parseReply(v []interface{}) (reply, error) {
	if len(v) != 7 {
		return reply{}, fmt.Errorf("hotkey: script replied %d values, want 7", len(v))
	}
	var n [7]int64
	for i, x := range v {
		y, ok := x.(int64)
		if !ok {
			return reply{}, fmt.Errorf("hotkey: script reply %d has type %T", i, x)
		}
		n[i] = y
	}
	r := reply{granted: n[0] == 1, k: n[1], valid: time.Duration(n[2]) * time.Microsecond, e: n[3],
		remaining: n[4], retryAfter: -1, resetAfter: time.Duration(n[6]) * time.Microsecond}
	if n[5] >= 0 {
		r.retryAfter = time.Duration(n[5]) * time.Microsecond
	}
	return r, nil
}
