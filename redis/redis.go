// Package redis runs limitkit's algorithms in Redis, so every process of a
// fleet shares one limit. redis.New(client, key, cfg) takes the same configs
// as memory.New and makes the same decisions: a service that scales out
// swaps one constructor call.
//
// Each decision is made by a Lua script (EVALSHA, with EVAL when the script
// is not cached): read, decide and write atomically, in one round trip; the
// concurrent decisions of every limiter on one client share script calls
// and round trips (see WithoutCoalescing). For many keys of one config (a
// limit per user), make the limiters with a Factory. Time comes from
// Redis's TIME inside the script, never from the clients' clocks, so replicas
// whose clocks disagree still agree on every decision. Every key expires when
// its state is initial again (full bucket, empty window), so memory is
// bounded by the active keys.
//
// Keys are prefix + "{" + key + "}" + suffix, the suffix naming the
// algorithm (":tb", ":fw", ":sgc", ":sw", ":slc", ":cc", and ":m" or ":n"
// for a second key; a sliding window declares both its forms' keys, ":sw",
// ":sgc" and ":sgc:m", to convert one's state into the other's), so limiters of different algorithms on one key never read each other's
// state. All keys of one limiter share a hash slot, so Redis Cluster works;
// any go-redis UniversalClient (single node, Cluster, Ring, Sentinel) does.
//
// Inside this project go-redis is imported as goredis, as in these examples:
//
//	import goredis "github.com/redis/go-redis/v9"
package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/leases"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed tokenbucket.lua
	tokenBucketLua string
	//go:embed fixedwindow.lua
	fixedWindowLua string
	//go:embed log.lua
	logLua string
	//go:embed slidingwindow.lua
	slidingWindowLua string
	//go:embed slidinglog.lua
	slidingLogLua string
	//go:embed concurrency.lua
	concurrencyLua string

	//go:embed batch.lua
	batchLua string

	tokenBucketScript   = script(tokenBucketLua)
	fixedWindowScript   = script(fixedWindowLua)
	slidingWindowScript = script(logLua + slidingWindowLua)
	slidingLogScript    = script(logLua + slidingLogLua)
	concurrencyScript   = script(concurrencyLua)
)

// script composes an algorithm's script: the prelude, the algorithm, which
// defines decide(K, ARGV) for one decision on the keys K, and batch.lua, which calls it once
// or for each decision of a batch (see coalesce.go).
func script(algorithm string) *luaScript {
	src := prelude + algorithm + batchLua
	h := sha1.Sum([]byte(src))
	return &luaScript{src: src, hash: hex.EncodeToString(h[:])}
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

// MaxKeyLen bounds the key given to New, in bytes.
const MaxKeyLen = 1024

// Errors of this package; test them with errors.Is.
var (
	// ErrInvalidKey: the key is empty, longer than MaxKeyLen, or starts
	// with "}" (the hash tag prefix{key} would be empty, and a Cluster
	// would hash a limiter's keys to different slots). Nothing is sent.
	ErrInvalidKey = errors.New("redis: invalid key")
	// ErrUnavailable wraps a Redis failure under the default FailError
	// policy; the error wraps the failure too (context.DeadlineExceeded when
	// the limiter's timeout passed, a network error, ...): errors.Is and
	// errors.As find both.
	ErrUnavailable = errors.New("redis: backend unavailable")
)

// FailurePolicy says what a limiter answers when Redis cannot decide
// (network error, timeout, server down).
type FailurePolicy uint8

const (
	FailError  FailurePolicy = iota // return an error wrapping ErrUnavailable (default)
	FailOpen                        // grant the request, with no limit applied: the lease's Limit and Remaining are -1
	FailClosed                      // refuse it, with ReasonUnavailable
)

// failedOpen is the Infos of FailOpen's answers: grants made with no limit
// applied, whose figures (-1) say so, so that a client told of them (the
// RateLimit header fields httplimit writes) is not asked to slow down
// while Redis fails.
var failedOpen = leases.MakeInfos(-1)

// Option configures New.
type Option func(*options)

type options struct {
	noCache    bool
	noCoalesce bool
	prefix     string
	clock      ratelimit.Clock
	policy     FailurePolicy
	fallback   ratelimit.Limiter
	timeout    time.Duration
	leaseTTL   time.Duration
	onFailure  func(error)
}

// WithPrefix sets the key prefix; the default is "ratelimit:". It must not
// hold "{" or "}": a limiter's keys share the hash tag of its key, so that
// they share a Cluster slot.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithFailurePolicy sets what to answer when Redis fails; FailError by default.
func WithFailurePolicy(p FailurePolicy) Option { return func(o *options) { o.policy = p } }

// WithFallback answers from a local limiter (memory.New, say) while Redis fails.
func WithFallback(l ratelimit.Limiter) Option { return func(o *options) { o.fallback = l } }

// WithOnFailure calls f with the error of each call to Redis that failed
// (a network error, the limiter's timeout, an error reply) in Acquire,
// Wait, Refund and a concurrency lease's Release (including the calls a
// caller does not see: a cancelled reservation's refund), before the
// failure policy answers the caller; a call whose caller's ctx ended is
// not a failure, nor are the background renewals of concurrency leases.
// It is called whatever the policy, so that what a caller cannot see is
// counted too: a FailOpen grant, and an answer of the fallback
// (WithFallback). f runs on the caller's goroutine; it must be quick and
// must not call the limiter. The otel module's Recorder.CountRedisFailures
// is one.
func WithOnFailure(f func(error)) Option { return func(o *options) { o.onFailure = f } }

// DefaultTimeout is the bound on each call to Redis when WithTimeout is not
// given.
const DefaultTimeout = time.Second

// WithTimeout bounds each call to Redis (Acquire, Wait's round trips,
// Refund, Stats), DefaultTimeout (1s) by default: past it the call returns,
// within a few milliseconds, with the failure policy's answer (FailError:
// an error wrapping both ErrUnavailable and context.DeadlineExceeded). The
// bound holds whatever the go-redis client's options. With
// Options.ContextTimeoutEnabled (as the README's client sets), go-redis
// itself stops reading at the deadline, and a lone call runs on its
// caller's goroutine (calls that queue behind others leave in a batch from
// a sending goroutine either way). Without it (or with socket deadlines
// disabled, a ReadTimeout or WriteTimeout of -2, or with a UniversalClient
// other than go-redis's Client, ClusterClient and Ring) go-redis ignores a
// context's deadline while reading a reply, so each call runs in a
// goroutine the caller stops waiting for at the deadline (a goroutine
// switch per call: about 1.5x the latency of a lone caller,
// BenchmarkRedisLone in the bench module); a
// script call so left behind finishes on its own when the server answers
// or the client's own timeouts (ReadTimeout, 3s by default) fire. Either
// way a decision the server makes after the caller left (a permit taken)
// stands, as with a cancelled ctx. A caller's ctx that ends sooner ends the
// call sooner, with the ctx's error; with ContextTimeoutEnabled a
// cancellation (rather than a deadline) is seen before the call leaves and
// once its answer arrives, the deadline bounding the wait in between. A d
// of zero or less removes the bound: calls then wait for their ctx or the
// client's own timeouts.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithLeaseTTL sets how long a concurrency lease survives its holder's
// silence (a crashed process): leases are renewed every TTL/3 (on the
// limiter's clock) while held, by one goroutine per client that renews the
// leases of all its limiters in pipelined round trips. The default is 30s.
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// WithoutRefusalCache sends every request to Redis. By default a refusal of
// p permits with RetryAfter r is remembered, and requests for the same p
// permits on this limiter are refused locally until r has passed, or one
// second, whichever comes first, with the remaining RetryAfter: grants
// only use permits up, so a flood on an over-limit key costs Redis one
// call per RetryAfter (at most one per second) instead of one per
// request. A grant, a refund, a cancelled reservation, a Reset or a
// Reconfigure through this limiter forgets the cached refusal. What other
// processes do meanwhile that gives permits back (a Reset, as an admin's
// reset of a key; a refund; a cancelled token-bucket reservation; a
// Reconfigure that raises the limit) is seen within that second: until
// then the cache refuses what Redis would grant, never the reverse. A
// cached refusal reports Remaining as of the refusal (grants elsewhere may
// have lowered it since). Concurrency refusals (no RetryAfter) and
// token-bucket Wait are never cached.
func WithoutRefusalCache() Option { return func(o *options) { o.noCache = true } }

// WithoutCoalescing makes every decision its own script call. By default
// the concurrent decisions of every limiter on one client are sent in
// batches: the decisions of one algorithm in one script call that makes
// them one after another at one instant (one TIME; one GET and one SET per
// key of a string state), the script calls of several algorithms in one
// pipelined round trip. On a single node one batch may carry any keys; on a
// Cluster a batch carries the keys of one hash slot (so one slot's batch
// never waits for another's), and on a Ring or another client the keys of
// one hash tag (a single-node client's batches may carry several keys in
// one script call, which a proxy that shards one endpoint, such as
// twemproxy, refuses: use WithoutCoalescing behind one). Decisions are the
// same as the same calls made one by one, and a decision that fails (a key
// of another type, say) fails alone.
// There is no linger time: a lone caller's call leaves at once, alone, so
// it costs nothing at low concurrency; callers that arrive while batches
// are in flight leave together in the next one. Measured at 64 goroutines
// (see bench/README.md), batches make a token bucket about 3x faster than
// go-redis/redis_rate on one key, and 2x over 10,000 keys.
func WithoutCoalescing() Option { return func(o *options) { o.noCoalesce = true } }

// WithClock pins the time sent to the scripts to c.Now(), and makes Wait
// sleep on c. For tests only: in production the time is Redis's.
func WithClock(c ratelimit.Clock) Option { return func(o *options) { o.clock = c } }

// Limiter is a ratelimit.Limiter whose state lives in Redis. It is also a
// ratelimit.Refunder (see Refund), so a Chain that a later member refuses
// spends nothing of it.
//
// A Limiter is a handle: its key, its pipe and a few words of its own; what
// every limiter of its config shares (client, script, parameters, options)
// is held once by its Factory, so a million keys of one config cost about a
// million handles (see Factory).
type Limiter struct {
	*shape
	keys    []string
	pipe    *pipe        // nil with WithoutCoalescing
	used    atomic.Int64 // UnixNano of the last call, for IdleFor
	refusal atomic.Pointer[refusal]
	closed  atomic.Bool
	mu      sync.Mutex // guards making x, and Close
	x       atomic.Pointer[ext]
}

// shape is what every limiter of one Factory shares.
type shape struct {
	client   goredis.UniversalClient
	script   *luaScript
	suffixes []string // of the keys, after prefix + "{" + key + "}"
	p        atomic.Pointer[params]
	reserves bool // token bucket: Wait reserves in the script
	release  bool // concurrency: leases hold permits
	direct   bool // the client bounds a call by its ctx's deadline: see run
	o        options
}

// params is a configuration of the shape's algorithm, which Reconfigure
// replaces whole. It does not change once made.
type params struct {
	cfg       ratelimit.Config // what it was made from (a value, not a pointer)
	args      []interface{}    // the algorithm's parameters, after now, permits and op
	capacity  int64
	infos     leases.Infos // of capacity; a rate grant's token is its instant (us)
	queue     ratelimit.Queue
	unlimited bool
}

// params is the shape's current configuration.
func (s *shape) params() *params { return s.p.Load() }

// ext is what a limiter needs only once it sleeps (Wait) or holds
// concurrency leases, made on first need (see Limiter.ext): a limiter that
// only acquires stays small.
type ext struct {
	closed   chan struct{} // closed by Close: wakes sleeping waiters
	held     leases.Info   // concurrency grants; the token is the holder's number
	holders  sync.Map      // holder number -> *holder, for renewal and release
	nHolders atomic.Int64
	seq      atomic.Uint64
	id       string // this limiter's part of its holders' names
	// Lease renewal, guarded by renewMu: the client's renewer while
	// leases are held, the timer that marks them due on the limiter's
	// clock, and whether they wait in the renewer's due list.
	renewer     *renewer
	renewTimer  ratelimit.Timer
	renewQueued bool
}

// ext returns l's ext, making it on first need.
func (l *Limiter) ext() *ext {
	if x := l.x.Load(); x != nil {
		return x
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if x := l.x.Load(); x != nil {
		return x
	}
	x := &ext{closed: make(chan struct{}), id: strconv.FormatUint(rand.Uint64(), 36)}
	x.held = leases.GrantInfo(l.params().capacity, (*releaser)(l))
	if l.closed.Load() {
		close(x.closed)
	}
	l.x.Store(x)
	return x
}

// refusal is a remembered refusal: requests of exactly permits are refused
// until the local instant until (UnixNano), with the RetryAfter left until
// retryAt, the refusal's own; until is at most maxRefusalAge after the
// refusal. (Larger requests would be refused too, but their RetryAfter is
// longer: they go to Redis.)
type refusal struct {
	permits, remaining      int64
	until, retryAt, resetAt int64
	params                  *params // the configuration it was decided under: a Reconfigure voids it
}

// maxRefusalAge bounds how long a refusal is remembered, whatever its
// RetryAfter, so that what other processes change meanwhile (a Reset, a
// refund, a Reconfigure) is seen within it: a flood on an over-limit key
// then costs Redis one call per second at most.
const maxRefusalAge = time.Second

// cached answers from the remembered refusal, when it applies.
func (l *Limiter) cached(p int64, at time.Time) (ratelimit.Lease, bool) {
	r := l.refusal.Load()
	if r == nil || max(p, 1) != r.permits || r.params != l.params() {
		return ratelimit.Lease{}, false
	}
	now := at.UnixNano()
	if now >= r.until {
		return ratelimit.Lease{}, false
	}
	d := ratelimit.Decision{Remaining: r.remaining, RetryAfter: time.Duration(r.retryAt - now), ResetAfter: time.Duration(max(r.resetAt-now, 0))}
	return backend.Lease(&l.params().infos, d, ratelimit.ReasonLimit, 0), true
}

// remember caches a refusal of p permits decided at the local instant at; a
// grant forgets the cached refusal, whose Remaining it changed.
// pm is the configuration loaded before the call: the one the script ran
// with, or an older one (then the refusal is never used).
func (l *Limiter) remember(at time.Time, p int64, r reply, pm *params) {
	if r.granted && l.refusal.Load() != nil {
		l.refusal.Store(nil)
	}
	if l.o.noCache || r.granted || r.retryAfter <= 0 {
		return
	}
	t := at.UnixNano()
	l.refusal.Store(&refusal{permits: max(p, 1), remaining: r.remaining, until: t + int64(min(r.retryAfter, maxRefusalAge)),
		retryAt: t + int64(r.retryAfter), resetAt: t + int64(r.resetAfter), params: pm})
}

// New returns a limiter for cfg (any algorithm package's Config) whose state
// is kept in Redis under key. The key is refused with ErrInvalidKey when
// empty, longer than MaxKeyLen or starting with "}"; windows and periods must be whole
// microseconds, Redis's clock resolution. It is NewFactory(client, cfg,
// opts...).New(key): for many keys of one config (a limit per user), make
// the Factory once.
func New(client goredis.UniversalClient, key string, cfg ratelimit.Config, opts ...Option) (*Limiter, error) {
	f, err := NewFactory(client, cfg, opts...)
	if err != nil {
		return nil, err
	}
	return f.New(key)
}

// Factory makes the limiters of one config on one client, a key each: what
// they share is held once here, and each limiter is a small handle, so a
// partitioned limiter over Redis costs little memory per key (175 bytes
// per key, partition record included, for IPv4 keys: BenchmarkRedisPartitioned
// in the bench module). A handle grows once it waits or holds concurrency
// leases. The concurrent decisions of every limiter on one client are sent
// together (see WithoutCoalescing).
type Factory struct{ s *shape }

// NewFactory checks cfg and opts as New does, for limiters made by New and
// ForKey.
func NewFactory(client goredis.UniversalClient, cfg ratelimit.Config, opts ...Option) (*Factory, error) {
	o := options{prefix: "ratelimit:", leaseTTL: 30 * time.Second, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	s, err := newShape(client, cfg, o)
	if err != nil {
		return nil, err
	}
	return &Factory{s}, nil
}

// newShape checks client, cfg and o, and returns the shape of cfg's
// limiters.
func newShape(client goredis.UniversalClient, cfg ratelimit.Config, o options) (*shape, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis: nil client", ratelimit.ErrInvalidConfig)
	}
	if t := reflect.TypeOf(client); !t.Comparable() {
		return nil, fmt.Errorf("%w: redis: client type %v is not comparable (pass a pointer)", ratelimit.ErrInvalidConfig, t)
	}
	if err := check.Config("redis", cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("%w: redis: prefix %q holds a brace, which would change the keys' hash tag", ratelimit.ErrInvalidConfig, o.prefix)
	}
	if o.leaseTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: redis: lease TTL must be at least 1ms, got %v", ratelimit.ErrInvalidConfig, o.leaseTTL)
	}
	cfg = check.Value(cfg)
	s := &shape{client: client, direct: honoursDeadlines(client), o: o}
	pm := &params{cfg: cfg, capacity: cfg.Capacity(), infos: leases.MakeInfos(cfg.Capacity()), queue: cfg.QueueOptions()}
	us := func(field string, d time.Duration) (int64, error) {
		if d%time.Microsecond != 0 {
			return 0, fmt.Errorf("%w: redis: %s %v is not a whole number of microseconds", ratelimit.ErrInvalidConfig, field, d)
		}
		return int64(d / time.Microsecond), nil
	}
	var err error
	switch c := cfg.(type) {
	case tokenbucket.Config:
		var period int64
		if period, err = us("Period", c.Period); err != nil {
			return nil, err
		}
		s.script, s.reserves, s.suffixes = tokenBucketScript, true, []string{":tb"}
		pm.unlimited = c.Rate == rate.Inf
		pm.args = []interface{}{luaNumber(float64(c.Rate)), c.Burst, period, c.PerPeriod, check.QueueLimit(c.Queue), int(c.Queue.Order)}
	case fixedwindow.Config:
		var w int64
		if w, err = us("Window", c.Window); err != nil {
			return nil, err
		}
		s.script, pm.args, s.suffixes = fixedWindowScript, []interface{}{c.Limit, w}, []string{":fw"}
	case slidingwindow.Config:
		var w int64
		if w, err = us("Window", c.Window); err != nil {
			return nil, err
		}
		if c.Segments > 0 && w%int64(c.Segments) != 0 {
			return nil, fmt.Errorf("%w: redis: Window %v must split into Segments %d of whole microseconds", ratelimit.ErrInvalidConfig, c.Window, c.Segments)
		}
		// Both forms declare each other's keys, to convert the other's
		// state after a switch (see slidingwindow.lua).
		s.script, pm.args, s.suffixes = slidingWindowScript, []interface{}{c.Limit, w, c.Segments}, []string{":sw", ":sgc", ":sgc:m"}
	case slidinglog.Config:
		var w int64
		if w, err = us("Window", c.Window); err != nil {
			return nil, err
		}
		s.script, pm.args, s.suffixes = slidingLogScript, []interface{}{c.Limit, w}, []string{":slc", ":slc:m"}
	case concurrency.Config:
		s.script, s.release = concurrencyScript, true
		pm.args = []interface{}{c.Limit, int64(o.leaseTTL / time.Microsecond)}
		s.suffixes = []string{":cc", ":cc:n"}
	default:
		return nil, fmt.Errorf("%w: redis: unsupported config type %T", ratelimit.ErrInvalidConfig, cfg)
	}
	s.p.Store(pm)
	return s, nil
}

// New returns the limiter of key, as the package's New does.
func (f *Factory) New(key string) (*Limiter, error) {
	if key == "" || len(key) > MaxKeyLen {
		return nil, fmt.Errorf("%w: length %d, want 1 to %d bytes", ErrInvalidKey, len(key), MaxKeyLen)
	}
	if key[0] == '}' {
		// prefix{}x}: an empty hash tag, so a Cluster would hash each of
		// the limiter's keys whole, to different slots.
		return nil, fmt.Errorf("%w: %q starts with }", ErrInvalidKey, key)
	}
	base := f.s.o.prefix + "{" + key + "}"
	l := &Limiter{shape: f.s, keys: make([]string, len(f.s.suffixes))}
	for i, suffix := range f.s.suffixes {
		l.keys[i] = base + suffix
	}
	if !f.s.o.noCoalesce {
		l.pipe = pipeFor(f.s.client, l.keys)
	}
	l.used.Store(l.localNow().UnixNano())
	return l, nil
}

// ForKey is New as a ratelimit.Limiter: partitioned.Config's New.
func (f *Factory) ForKey(key string) (ratelimit.Limiter, error) { return f.New(key) }

// honoursDeadlines reports whether go-redis bounds a call on client by its
// ctx's deadline: with Options.ContextTimeoutEnabled and socket deadlines
// not disabled (a ReadTimeout or WriteTimeout of -2). Other clients ignore
// a ctx's deadline while reading a reply.
func honoursDeadlines(client goredis.UniversalClient) bool {
	switch c := client.(type) {
	case *goredis.Client:
		o := c.Options() // as initialised: -1 means no socket deadlines
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case *goredis.ClusterClient:
		o := c.Options() // -1 made 0: -2 means no socket deadlines
		return o.ContextTimeoutEnabled && o.ReadTimeout > -2 && o.WriteTimeout > -2
	case *goredis.Ring:
		o := c.Options() // as given: -2 means no socket deadlines
		return o.ContextTimeoutEnabled && o.ReadTimeout > -2 && o.WriteTimeout > -2
	}
	return false
}

// The script protocol, in one place. A call's ARGV is now (empty: the
// server's TIME), permits, an op, the algorithm's parameters (see
// NewFactory), then the op's arguments; every script replies with the
// numbers of reply. Ops: opAcquire (every algorithm; permits 0 is a status
// check; concurrency: the holder's name), opWait (token bucket: acquire or
// reserve; the most us the caller can wait, -1 for no bound), opCancel
// (token bucket: give back a cancelled reservation; its due instant and
// prior), opRefund (rate algorithms: take back a grant; its instant),
// opRelease and opRenew (concurrency: the holder's name). A refused
// reservation's extra is refusedQueueFull or refusedDeadline.
const (
	opAcquire = "a"
	opWait    = "w"
	opCancel  = "f"
	opRefund  = "u"
	opRelease = "r"
	opRenew   = "n"

	refusedQueueFull = 2
	refusedDeadline  = 3
)

// reply is what every script returns. Durations travel in microseconds.
type reply struct {
	granted    bool
	remaining  int64
	retryAfter time.Duration // negative: unknown; for a reservation, its wait
	resetAfter time.Duration
	// extra: for a grant of a rate algorithm, the instant (us) it was
	// counted at (a reservation's: its due instant); for a token-bucket
	// Wait refused, 2 (queue full) or 3 (deadline); for concurrency, the
	// result of a release or renewal.
	extra int64
	prior int64 // a reservation's: the due instant (us) of the one before it
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
		v, err = l.pipe.do(ctx, l, own, start) // bounds the call by the timeout itself
	} else {
		ctx, cancel := l.bound(ctx)
		defer cancel()
		v, err = l.run(ctx, l.lone(own), nil)
	}
	if err != nil {
		return reply{}, err
	}
	return parseReply(v)
}

// bound returns ctx bounded by the limiter's timeout (see WithTimeout).
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.o.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.o.timeout)
}

type result struct {
	v   []interface{}
	err error
}

// run makes one script call on ctx and returns its answer, or ctx's error
// once ctx ends, whatever the client's options. When the client bounds a
// call by its ctx's deadline (see honoursDeadlines) and ctx has one, or
// when ctx can never end, the call runs on the caller's goroutine: a
// cancellation is then seen before the call leaves and when its answer
// arrives, and the deadline bounds the wait. Otherwise it runs in a
// goroutine the caller does not wait on past ctx, which finishes on its own
// when the server answers or the client's own timeouts fire; that costs a
// goroutine switch per call (BenchmarkRedisLone in the bench module). then
// (nil: nothing) runs once: when the call is answered, before the answer is
// handed over, or when the caller stops waiting, if that comes first (a
// stalled call holds nothing of the pipe's).
func (l *Limiter) run(ctx context.Context, call evalCall, then func()) ([]interface{}, error) {
	_, deadline := ctx.Deadline()
	if ctx.Done() == nil || (l.direct && deadline) {
		v, err := call.run(ctx, l.client).Slice()
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
		v, err := call.run(ctx, l.client).Slice()
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
// extra. A batch sends them with the parameters of the decisions'
// Factory once (see group); lone makes a call of one decision of them.
func (l *Limiter) own(local time.Time, op string, permits int64, extra []interface{}) []interface{} {
	now := ""
	if l.o.clock != nil {
		now = strconv.FormatInt(local.UnixMicro(), 10)
	}
	return append(append(make([]interface{}, 0, headLen+len(extra)), now, permits, op), extra...)
}

// lone is the script call of one decision of the limiter, whose own
// arguments are own: ARGV is its head, the parameters, then its extra
// arguments.
func (l *Limiter) lone(own []interface{}) evalCall {
	pa := l.params().args
	c := l.script.call(l.keys, len(own)+len(pa))
	c.cmd = append(append(append(c.cmd, own[:headLen]...), pa...), own[headLen:]...)
	return c
}

// luaNumber formats f for the scripts' tonumber: exactly (the shortest
// form that reads back as f), and with a decimal point, without which
// gopher-lua's tonumber (miniredis's) reads no exponent and no more than
// 19 digits: "1e+20" is sent as "1.0e+20". rate.Inf (which reaches a
// script only in a reservation's cancel) is "+Inf", which strtod reads.
func luaNumber(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if math.IsInf(f, 0) {
		return s
	}
	switch i := strings.IndexByte(s, 'e'); {
	case strings.IndexByte(s, '.') >= 0:
		return s
	case i >= 0:
		return s[:i] + ".0" + s[i:]
	}
	return s + ".0"
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
	r := reply{granted: n[0] == 1, remaining: n[1], retryAfter: -1, resetAfter: time.Duration(n[3]) * time.Microsecond, extra: n[4], prior: n[5]}
	if n[2] >= 0 {
		r.retryAfter = time.Duration(n[2]) * time.Microsecond
	}
	return r, nil
}

func (l *Limiter) decision(r reply) ratelimit.Decision {
	return ratelimit.Decision{Granted: r.granted, Remaining: r.remaining, RetryAfter: r.retryAfter, ResetAfter: r.resetAfter}
}

func (l *Limiter) isClosed() bool { return l.closed.Load() }

// Acquire takes permits now or refuses, in one round trip.
func (l *Limiter) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, l.params().capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	if l.isClosed() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	pm := l.params()
	if pm.unlimited {
		return backend.Lease(&pm.infos, ratelimit.Decision{Granted: true, Remaining: -1}, ratelimit.ReasonNone, 0), nil
	}
	p := int64(permits)
	at := l.localNow()
	if lease, ok := l.cached(p, at); ok {
		return lease, nil
	}
	var n uint64
	if l.release {
		n = l.ext().seq.Add(1)
	}
	r, err := l.call(ctx, at, opAcquire, p, l.tail(l.holderName(n))...)
	if err != nil {
		return l.fail(ctx, err, func(f ratelimit.Limiter) (ratelimit.Lease, error) { return f.Acquire(ctx, permits) })
	}
	if err := l.exceeds(r, p); err != nil {
		return ratelimit.Lease{}, err
	}
	l.remember(at, p, r, pm)
	return l.lease(r, p, n, ratelimit.ReasonLimit), nil
}

// CheckPermits reports the error Acquire and Wait return for permits
// whatever the state (ratelimit.PermitChecker): a negative permits, or
// more than the capacity of the configuration this process applies.
func (l *Limiter) CheckPermits(permits int) error {
	return base.CheckPermits(permits, l.params().capacity)
}

// exceeds is the error of a refusal r of p permits that are more than the
// capacity now: a Reconfigure lowered it while the call was on its way
// (the script refuses what it could never grant), so the call gets the
// error it would have got a moment later, and no refusal is remembered.
func (l *Limiter) exceeds(r reply, p int64) error {
	if r.granted {
		return nil
	}
	return base.CheckPermits(int(p), l.params().capacity)
}

// tail is the script arguments after the parameters.
func (l *Limiter) tail(id string) []interface{} {
	switch {
	case l.reserves:
		return []interface{}{-1}
	case l.release:
		return []interface{}{id}
	}
	return nil
}

// lease makes the lease of r, a decision on p permits (for concurrency, by
// holder number n). A grant of a rate algorithm carries the instant it was
// counted at as its token, for Refund; a status check's carries 0 (it took
// nothing).
func (l *Limiter) lease(r reply, p int64, n uint64, reason ratelimit.Reason) ratelimit.Lease {
	d := l.decision(r)
	switch {
	case !d.Granted || p == 0:
		return backend.Lease(&l.params().infos, d, reason, 0)
	case l.release:
		if !l.hold(n, p) {
			return backend.Lease(&l.params().infos, ratelimit.Decision{RetryAfter: -1}, ratelimit.ReasonClosed, 0)
		}
		return backend.Grant(&l.ext().held, d, n)
	}
	return backend.Grant(&l.params().infos[0], d, uint64(max(r.extra, 0)))
}

// ended is ctx's error once ctx has ended or its deadline has passed: a
// client that bounds a call by the deadline (ContextTimeoutEnabled) fails
// it with its socket's timeout an instant before ctx's own timer fires,
// and the call still ended with its caller's deadline, not with a Redis
// failure.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// failed tells WithOnFailure's function of a failed call.
func (l *Limiter) failed(err error) {
	if l.o.onFailure != nil {
		l.o.onFailure(err)
	}
}

// fail applies the failure policy to a Redis error.
func (l *Limiter) fail(ctx context.Context, err error, fallback func(ratelimit.Limiter) (ratelimit.Lease, error)) (ratelimit.Lease, error) {
	if err := ended(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	l.failed(err)
	if l.o.fallback != nil {
		return fallback(l.o.fallback)
	}
	switch l.o.policy {
	case FailOpen:
		// No limit was applied, and nothing was taken: no figures, nothing
		// to refund or release.
		return backend.Lease(&failedOpen, ratelimit.Decision{Granted: true, Remaining: -1, RetryAfter: -1}, ratelimit.ReasonNone, 0), nil
	case FailClosed:
		return backend.Lease(&l.params().infos, ratelimit.Decision{RetryAfter: -1}, ratelimit.ReasonUnavailable, 0), nil
	}
	return ratelimit.Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Wait takes permits, waiting until ctx is done. The token bucket reserves in
// the script and sleeps once until its turn (a cancel refunds); the window
// algorithms sleep until RetryAfter plus a little jitter and try again;
// concurrency polls with backoff (1ms doubling to 50ms) until a holder
// releases. A ctx deadline that cannot be met is refused at once. Wait(ctx,
// 0) waits, the same way but never reserving and whatever the queue limit,
// until at least one permit is available, and takes nothing.
func (l *Limiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return l.WaitObserved(ctx, permits, nil)
}

// WaitObserved is Wait, telling o (when not nil) of the time the call spends
// queued, as ratelimit.ObservableWaiter says: from its first sleep to its
// answer. A call answered by its first round trip tells o nothing.
func (l *Limiter) WaitObserved(ctx context.Context, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, l.params().capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	q := base.Queueing[ratelimit.Lease]{O: o, Ctx: ctx, Permits: permits}
	lease, err := l.wait(ctx, permits, &q)
	return q.Leave(l.localNow, lease, err)
}

// wait is Wait after its arguments were checked.
func (l *Limiter) wait(ctx context.Context, permits int, q *base.Queueing[ratelimit.Lease]) (ratelimit.Lease, error) {
	if l.reserves && !l.params().unlimited && permits > 0 {
		return l.reserve(ctx, int64(permits), q)
	}
	backoff := time.Millisecond
	for {
		lease, err := l.Acquire(ctx, permits)
		if err != nil || lease.Acquired() || lease.Reason() == ratelimit.ReasonUnavailable {
			return lease, err
		}
		if int64(permits) > check.QueueLimit(l.params().queue) {
			return l.refusedAs(lease, ratelimit.ReasonQueueFull), nil
		}
		d, known := lease.RetryAfter()
		if known {
			if deadline, ok := ctx.Deadline(); ok && l.until(deadline) < d {
				return l.refusedAs(lease, ratelimit.ReasonDeadline), nil
			}
			d += time.Duration(rand.Int63n(int64(d/10) + 1)) // spread retries of competing processes
		} else {
			d, backoff = backoff, min(2*backoff, 50*time.Millisecond)
		}
		if deadline, ok := ctx.Deadline(); ok {
			d = min(d, max(l.until(deadline), 0))
		}
		if lease, err := l.sleep(ctx, d, q); err != nil || lease.Reason() == ratelimit.ReasonClosed {
			return lease, err
		}
	}
}

// refusedAs is lease, a refusal of l or of its fallback, refused for r
// instead, with the figures of the limiter that refused: a fallback's
// refusal keeps the fallback's Limit (one allocation, while Redis fails).
func (l *Limiter) refusedAs(lease ratelimit.Lease, r ratelimit.Reason) ratelimit.Lease {
	d := ratelimit.Decision{Remaining: lease.Remaining(), ResetAfter: lease.ResetAfter(), RetryAfter: -1}
	if ra, ok := lease.RetryAfter(); ok {
		d.RetryAfter = ra
	}
	if pm := l.params(); !leases.Lease(lease).From(&pm.infos[lease.Reason()]) {
		return ratelimit.NewLease(d, lease.Limit(), r, nil)
	}
	return backend.Lease(&l.params().infos, d, r, 0)
}

// reserve is the token bucket's Wait: one round trip takes the tokens (the
// bucket goes into debt), then one sleep until they have arrived. The
// reservation is due at the instant Acquire would grant them, and never
// before the reservations made earlier (the key's horizon): waiters are
// served in arrival order.
func (l *Limiter) reserve(ctx context.Context, p int64, q *base.Queueing[ratelimit.Lease]) (ratelimit.Lease, error) {
	if l.isClosed() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	maxWait := int64(-1) // in us, rounded down: a later due is refused
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = int64(max(l.until(deadline), 0) / time.Microsecond)
	}
	r, err := l.call(ctx, l.localNow(), opWait, p, maxWait)
	if err != nil {
		return l.fail(ctx, err, func(f ratelimit.Limiter) (ratelimit.Lease, error) {
			if ow, ok := f.(ratelimit.ObservableWaiter); ok && q.O != nil {
				return ow.WaitObserved(ctx, int(p), q.O) // its queueing, told as its own
			}
			return f.Wait(ctx, int(p))
		})
	}
	if err := l.exceeds(r, p); err != nil {
		return ratelimit.Lease{}, err
	}
	if !r.granted {
		switch r.extra {
		case refusedQueueFull:
			return l.lease(r, p, 0, ratelimit.ReasonQueueFull), nil
		case refusedDeadline:
			return l.lease(r, p, 0, ratelimit.ReasonDeadline), nil
		}
		return l.lease(r, p, 0, ratelimit.ReasonLimit), nil
	}
	if r.retryAfter < 0 { // granted at once
		l.remember(time.Time{}, p, r, nil) // a grant: the remembered refusal is forgotten
		return l.lease(r, p, 0, ratelimit.ReasonNone), nil
	}
	lease, err := l.sleep(ctx, r.retryAfter, q)
	if err != nil || lease.Reason() == ratelimit.ReasonClosed {
		// Give the reserved tokens back; the caller's ctx may be done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(l.o.timeout, time.Second))
		if _, err := l.call(rctx, l.localNow(), opCancel, p, r.extra, r.prior); err != nil {
			l.failed(err)
		}
		cancel()
		l.refusal.Store(nil) // the tokens came back
		return lease, err
	}
	r.retryAfter = -1
	l.remember(time.Time{}, p, r, nil) // a grant: the remembered refusal is forgotten
	return l.lease(r, p, 0, ratelimit.ReasonNone), nil
}

// Refund gives back the permits of lease, a grant of permits by this
// limiter, as ratelimit.Refunder says: in one round trip the script takes
// them back from where the grant was counted (the grant's instant is the
// lease's token), as if they had never been granted, and only what still
// counts: tokens less what refilled since the grant (as
// tokenbucket.Model.Refund), a window's count while it is the current or
// previous one, the log's entry (sliding log, segmented window) while it is
// in the window; a grant followed by more than 128 newer log entries is not
// taken back, which bounds the script's work. For a concurrency lease it is
// Release. Refusals, status checks and FailOpen leases change nothing, nor
// do leases of limiters of another configuration; a lease of another
// handle on the same key and config is taken as this one's (the state is
// shared). A lease of the fallback (WithFallback) is refunded there when
// the fallback is a Refunder.
func (l *Limiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	capacity := l.params().capacity
	if l.release {
		capacity = math.MaxInt64 // a lease holds what it holds, whatever the limit now
	}
	if err := base.CheckPermits(permits, capacity); err != nil {
		return err
	}
	if err := base.CheckContext(ctx); err != nil {
		return err
	}
	if l.isClosed() {
		return ratelimit.ErrClosed
	}
	var at uint64
	var ok bool
	if l.release {
		at, ok = backend.Token(lease, &l.ext().held)
	} else {
		at, ok = backend.Token(lease, &l.params().infos[0])
	}
	if !ok {
		// Not ours: the fallback's, when it granted while Redis failed.
		if f, isRefunder := l.o.fallback.(ratelimit.Refunder); isRefunder {
			return f.Refund(ctx, lease, permits)
		}
		return nil
	}
	if l.release {
		(*releaser)(l).Release(at)
		return nil
	}
	if at == 0 || permits == 0 || l.params().unlimited {
		return nil
	}
	if _, err := l.call(ctx, l.localNow(), opRefund, int64(permits), int64(at)); err != nil {
		if err := ended(ctx); err != nil {
			return err
		}
		l.failed(err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l.refusal.Store(nil) // permits came back: a cached refusal may be wrong
	return nil
}

// sleep waits d on the limiter's clock; it returns ctx.Err() when ctx ends
// and a ReasonClosed refusal when the limiter is closed.
func (l *Limiter) sleep(ctx context.Context, d time.Duration, q *base.Queueing[ratelimit.Lease]) (ratelimit.Lease, error) {
	done := make(chan struct{})
	var t ratelimit.Timer
	if l.o.clock != nil {
		t = l.o.clock.AfterFunc(d, func() { close(done) })
	} else {
		t = time.AfterFunc(d, func() { close(done) })
	}
	defer t.Stop()
	if d > 0 {
		q.Join(l.localNow) // once the timer is armed
	}
	select {
	case <-done:
		return ratelimit.Lease{}, nil
	case <-ctx.Done():
		return ratelimit.Lease{}, ctx.Err()
	case <-l.ext().closed:
		return backend.Lease(&l.params().infos, ratelimit.Decision{RetryAfter: -1}, ratelimit.ReasonClosed, 0), nil
	}
}

func (l *Limiter) until(deadline time.Time) time.Duration {
	if l.o.clock != nil {
		return deadline.Sub(l.o.clock.Now())
	}
	return time.Until(deadline)
}

// Reconfigure applies cfg, a config of the limiter's algorithm, to this
// process's next calls (see ratelimit.Reconfigurer); every process that
// shares the keys applies it from its next call once it has reconfigured
// (a policy store tells them: see package policy), and decides with the
// old one until then. The state in Redis carries over as the script reads
// it with the new parameters, by each algorithm's rule: a token bucket
// keeps its tokens (clamped to the new burst at its next refill) and its
// reservations, and after a change of refill mode (Rate or Period) or
// Period keeps its whole tokens, refills nothing for the time before the
// change and restarts its refill clock at the change; a fixed window's
// count is held against the new limit, in now's window of the new length
// when the Window changed; a weighted sliding window holds, after a change
// of Window, the old window's estimate at the change (rounded up) as the
// count of now's new window; a sliding log's and a segmented window's
// entries leave at their instant plus the new Window (a change of segment
// length first merges what the old window holds into now's new segment);
// a sliding window switched between its weighted and segmented forms
// holds what the old form counts at the change (the weighted estimate
// rounded up, or the log's permits in its window) in now's new window or
// segment, as package memory does, and deletes the old form's keys; a
// concurrency limit's holders keep their permits. No change admits more
// than the old or the new configuration would. A cfg of another algorithm
// is an error wrapping ratelimit.ErrInvalidConfig that changes nothing
// (make a limiter under another key instead). The limiters of a Factory share their
// configuration: reconfiguring one reconfigures all. On a closed limiter it
// returns ratelimit.ErrClosed and changes nothing.
func (l *Limiter) Reconfigure(cfg ratelimit.Config) error {
	return l.shape.reconfigure(cfg, l.isClosed)
}

// Reconfigure reconfigures every limiter the factory made and makes (see
// Limiter.Reconfigure).
func (f *Factory) Reconfigure(cfg ratelimit.Config) error { return f.s.reconfigure(cfg, nil) }

// reconfigure applies cfg to the limiters of s. closed, when not nil,
// reports whether the limiter asked to is closed: once cfg is found valid,
// that is ratelimit.ErrClosed, and nothing changes for the limiters that
// share s either.
func (s *shape) reconfigure(cfg ratelimit.Config, closed func() bool) error {
	ns, err := newShape(s.client, cfg, s.o)
	if err != nil {
		return err
	}
	old, pm := s.params(), ns.params()
	// A sliding window's two forms share the script and the keys: each
	// converts the other's state (see slidingwindow.lua).
	if ns.script != s.script || !slices.Equal(ns.suffixes, s.suffixes) {
		return fmt.Errorf("%w: redis: Reconfigure from %#v to %#v: another algorithm, whose state is kept under other keys", ratelimit.ErrInvalidConfig, old.cfg, pm.cfg)
	}
	if closed != nil && closed() {
		return ratelimit.ErrClosed
	}
	if old.cfg != pm.cfg {
		s.p.Store(pm)
	}
	return nil
}

// Reset puts the limiter's state in Redis back to its initial state (see
// ratelimit.Resetter), for every process: its keys are deleted, in one
// round trip bounded by the limiter's timeout (a failure wraps
// ErrUnavailable). A concurrency limit forgets its holders: their leases,
// in any process, give nothing back when released (the script releases a
// holder only once, and only one it holds). The reservations of
// token-bucket waiters asleep in any process are forgiven, not taken
// again: they proceed at their turn, on top of the full bucket.
func (l *Limiter) Reset(ctx context.Context) error {
	if err := base.CheckContext(ctx); err != nil {
		return err
	}
	if l.isClosed() {
		return ratelimit.ErrClosed
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	errc := make(chan error, 1) // on its own goroutine: bounded even when the client ignores ctx
	go func() { errc <- l.client.Del(ctx, l.keys...).Err() }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l.refusal.Store(nil) // the remembered refusal no longer holds
	return nil
}

// Close stops lease renewal and wakes sleeping waiters with a ReasonClosed
// refusal; later calls return ratelimit.ErrClosed. Leases still held are
// released. It is safe to call twice. The client is not closed.
func (l *Limiter) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Swap(true) {
		return nil
	}
	if x := l.x.Load(); x != nil {
		close(x.closed)
		x.holders.Range(func(_, h any) bool {
			h.(*holder).release()
			return true
		})
		l.stopRenewal()
	}
	return nil
}

// IdleFor reports the local handle idle, for as long as it has not been
// called, unless it holds concurrency leases: the state lives in Redis, so
// dropping an unused handle (partitioned does) changes no decision.
func (l *Limiter) IdleFor() (time.Duration, bool) {
	if x := l.x.Load(); x != nil && x.nHolders.Load() != 0 {
		return 0, false
	}
	return max(0, time.Duration(l.localNow().UnixNano()-l.used.Load())), true
}

// Stats asks Redis for the available permits (a status check, one round
// trip, bounded by the limiter's timeout: WithTimeout, DefaultTimeout by
// default); Queued, Granted and Refused are not tracked across processes.
// When Redis does not answer in time it reports zero Stats: StatsContext
// reports the error.
func (l *Limiter) Stats() ratelimit.Stats {
	s, _ := l.StatsContext(context.Background())
	return s
}

// StatsContext is Stats on ctx (bounded by the limiter's timeout too), with
// the error: ctx's when it ends first, otherwise one wrapping
// ErrUnavailable and the failure. The failure policy does not apply.
func (l *Limiter) StatsContext(ctx context.Context) (ratelimit.Stats, error) {
	if l.params().unlimited {
		return ratelimit.Stats{Available: l.params().capacity}, nil
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Stats{}, err
	}
	r, err := l.call(ctx, l.localNow(), opAcquire, 0, l.tail("-")...)
	if err != nil {
		if err := ended(ctx); err != nil {
			return ratelimit.Stats{}, err
		}
		return ratelimit.Stats{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return ratelimit.Stats{Available: max(r.remaining, 0)}, nil
}

// holderName is the name under which holder number n is recorded in
// Redis; "" for 0 (no holder).
func (l *Limiter) holderName(n uint64) string {
	if n == 0 {
		return ""
	}
	return l.ext().id + "-" + strconv.FormatUint(n, 36)
}

// holderID names a new holder.
func (l *Limiter) holderID() string { return l.holderName(l.ext().seq.Add(1)) }

// holder is a held concurrency lease, number n of its limiter: release
// removes it from Redis.
type holder struct {
	l        *Limiter
	n        uint64
	id       string
	permits  int64
	released atomic.Bool
}

// hold records holder number n of p permits, granted by Redis; false when
// the limiter was closed meanwhile (Close may have released its holders
// already), in which case the holder is released at once.
func (l *Limiter) hold(n uint64, p int64) bool {
	h := &holder{l: l, n: n, id: l.holderName(n), permits: p}
	x := l.ext()
	x.holders.Store(n, h)
	if x.nHolders.Add(1) == 1 {
		l.startRenewal()
	}
	if l.isClosed() {
		h.release()
		return false
	}
	return true
}

// releaser is the Releaser of a limiter's concurrency leases, whose token
// is the holder's number: one LeaseInfo serves every lease.
type releaser Limiter

// Release releases holder number n; only its first call has an effect.
func (r *releaser) Release(n uint64) {
	if h, ok := (*Limiter)(r).ext().holders.Load(n); ok {
		h.(*holder).release()
	}
}

func (h *holder) release() {
	if !h.released.CompareAndSwap(false, true) {
		return
	}
	x := h.l.ext()
	x.holders.Delete(h.n)
	if x.nHolders.Add(-1) == 0 {
		h.l.stopRenewal()
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(h.l.o.timeout, 5*time.Second))
	defer cancel()
	if _, err := h.l.call(ctx, h.l.localNow(), opRelease, h.permits, h.id); err != nil {
		h.l.failed(err) // the holder expires after the lease TTL
	}
}

// Lease renewal: one renewer per client (the goredis.UniversalClient value)
// with limiters holding leases, one goroutine each. Each such limiter has a
// timer on its own clock that puts it in its renewer's due list every
// TTL/3; the renewer's goroutine renews every lease of the limiters due, a
// pipeline of at most renewBatch script calls per round trip, and exits
// (leaving the registry) when no limiter of its client holds a lease.
var (
	renewMu  sync.Mutex
	renewers = map[goredis.UniversalClient]*renewer{}
)

// renewBatch bounds the renewals sent in one pipelined round trip.
const renewBatch = 256

type renewer struct {
	client goredis.UniversalClient
	n      int        // limiters registered; guarded by renewMu
	due    []*Limiter // guarded by renewMu
	wake   chan struct{}
}

// startRenewal registers l with its client's renewer, starting it if
// needed, once l holds a lease.
func (l *Limiter) startRenewal() {
	renewMu.Lock()
	defer renewMu.Unlock()
	x := l.ext()
	if x.renewer != nil || x.nHolders.Load() == 0 || l.isClosed() {
		return
	}
	r := renewers[l.client]
	if r == nil {
		r = &renewer{client: l.client, wake: make(chan struct{}, 1)}
		renewers[l.client] = r
		go r.run()
	}
	r.n++
	x.renewer = r
	l.schedule()
}

// stopRenewal unregisters l once it holds no lease or is closed.
func (l *Limiter) stopRenewal() {
	renewMu.Lock()
	defer renewMu.Unlock()
	x := l.ext()
	r := x.renewer
	if r == nil || (x.nHolders.Load() != 0 && !l.isClosed()) {
		return
	}
	x.renewer = nil
	x.renewTimer.Stop()
	if r.n--; r.n == 0 {
		r.signal()
	}
}

// schedule sets l's renewal timer to TTL/3 from now on l's clock; under
// renewMu.
func (l *Limiter) schedule() {
	d, x := l.o.leaseTTL/3, l.ext()
	switch {
	case x.renewTimer != nil:
		x.renewTimer.Reset(d)
	case l.o.clock != nil:
		x.renewTimer = l.o.clock.AfterFunc(d, l.renewDue)
	default:
		x.renewTimer = time.AfterFunc(d, l.renewDue)
	}
}

// renewDue puts l in its renewer's due list (its timer's function).
func (l *Limiter) renewDue() {
	renewMu.Lock()
	defer renewMu.Unlock()
	x := l.ext()
	r := x.renewer
	if r == nil || x.renewQueued {
		return
	}
	x.renewQueued = true
	r.due = append(r.due, l)
	r.signal()
}

func (r *renewer) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *renewer) run() {
	for range r.wake {
		renewMu.Lock()
		due := r.due
		r.due = nil
		for _, l := range due {
			l.ext().renewQueued = false
		}
		if r.n == 0 {
			delete(renewers, r.client)
			renewMu.Unlock()
			return
		}
		live := due[:0]
		for _, l := range due {
			if l.ext().renewer == r {
				l.schedule() // the next renewal, TTL/3 from this one
				live = append(live, l)
			}
		}
		renewMu.Unlock()
		r.renew(live)
	}
}

type renewal struct {
	l    *Limiter
	call evalCall
}

// renew extends every lease held by the limiters due, in pipelined round
// trips of at most renewBatch script calls. A failure is not retried before
// the next renewal: a lease lives TTL, renewed every TTL/3.
func (r *renewer) renew(due []*Limiter) {
	batch := make([]renewal, 0, renewBatch)
	for _, l := range due {
		if l.isClosed() {
			continue
		}
		l.ext().holders.Range(func(_, v any) bool {
			h := v.(*holder)
			batch = append(batch, renewal{l, l.lone(l.own(l.localNow(), opRenew, h.permits, []interface{}{h.id}))})
			if len(batch) == renewBatch {
				r.send(batch)
				batch = batch[:0]
			}
			return true
		})
	}
	if len(batch) > 0 {
		r.send(batch)
	}
}

func (r *renewer) send(batch []renewal) {
	var timeout time.Duration
	calls := make([]evalCall, len(batch))
	for i, x := range batch {
		d := x.l.o.timeout
		if d <= 0 {
			d = x.l.o.leaseTTL / 3
		}
		timeout = max(timeout, d)
		calls[i] = x.call
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	evalAll(ctx, r.client, calls)
}
