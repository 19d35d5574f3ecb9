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
// A decision sent twice only counts twice (stricter), and a concurrency
// holder's acquire is recognised when sent again; but what gives permits
// back (Refund, Settle, a cancelled Wait's reservation) is applied each
// time it runs. go-redis sends a command again, by default (MaxRetries 3),
// when its reply is lost to a read timeout or a closed connection, after
// the server may have run it: for give-backs that are never applied twice,
// make the client with MaxRetries: -1 (a lost reply is then an error, and
// the permits stay taken, which only admits less).
//
// Inside this project go-redis is imported as goredis, as in these examples:
//
//	import goredis "github.com/redis/go-redis/v9"
package redis

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// Limiter is a ratelimit.Limiter whose state lives in Redis. It is also a
// refunder (control.Refund) (see Refund), so a Chain that a later member refuses
// spends nothing of it, and it settles reservations (control.Settle: see
// Settle).
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
	settles  bool // the script settles grants (see Settle)
	direct   bool // the client bounds a call by its ctx's deadline: see run
	o        options
}

// params is a configuration of the shape's algorithm, which Reconfigure
// replaces whole. It does not change once made.
type params struct {
	cfg       ratelimit.Config              // what it was made from (a value, not a pointer)
	args      []interface{}                 // the algorithm's parameters, after now, permits and op
	perCall   func(time.Time) []interface{} // each call's arguments after args, from its local instant (algo.Redis.PerCall); nil: none
	capacity  int64
	infos     backend.Outcomes // of capacity; a rate grant's token is its instant (us)
	queue     ratelimit.Queue
	unlimited bool
}

// params is the shape's current configuration.
func (s *shape) params() *params { return s.p.Load() }

// ext is what a limiter needs only once it sleeps (Wait) or holds
// concurrency leases, made on first need (see Limiter.ext): a limiter that
// only acquires stays small.
type ext struct {
	closed chan struct{} // closed by Close: wakes sleeping waiters
	// held is the Outcome of concurrency grants under the capacity in
	// force (heldOutcome); their token is the holder's number.
	held     atomic.Pointer[ratelimit.Outcome]
	holders  sync.Map // holder number -> *holder, for renewal and release
	nHolders atomic.Int64
	seq      atomic.Uint64
	id       string // this limiter's part of its holders' names
	// Lease renewal, guarded by renewMu: the client's renewer while
	// leases are held, the timer that marks them due on the limiter's
	// clock, and whether they wait in the renewer's due list.
	renewer     *renewer
	renewStop   func() bool // the renewal timer's
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
	if l.closed.Load() {
		close(x.closed)
	}
	l.x.Store(x)
	return x
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
	pm := &params{cfg: cfg, capacity: cfg.Capacity(), infos: backend.MakeOutcomes(cfg.Capacity()), queue: cfg.QueueOptions()}
	d, err := algo.Of("redis", cfg)
	if err != nil {
		return nil, err
	}
	enc, err := d.Redis(algo.RedisOptions{LeaseTTL: o.leaseTTL})
	if err != nil {
		return nil, err
	}
	if s.script, err = scriptOf(enc.Lua); err != nil {
		return nil, err
	}
	s.suffixes, s.reserves, s.release, s.settles = enc.Suffixes, enc.Reserves, enc.Holds, enc.Settles
	pm.args, pm.perCall, pm.unlimited = enc.Args, enc.PerCall, enc.Unlimited
	pm.tag(d.Grows(), s)
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

func (l *Limiter) decision(r reply) backend.Decision {
	return backend.Decision{Granted: r.granted, Remaining: r.remaining, RetryAfter: r.retryAfter, ResetAfter: r.resetAfter}
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
		return (&pm.infos).Lease(backend.Decision{Granted: true, Remaining: -1}, ratelimit.ReasonNone, 0), nil
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
// whatever the state (a Chain, which asks it first): a negative permits, or
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
		return (&l.params().infos).Lease(d, reason, 0)
	case l.release:
		if !l.hold(n, p) {
			return (&l.params().infos).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonClosed, 0)
		}
		return backend.Grant(l.heldOutcome(), d, n)
	}
	return backend.Grant(&l.params().infos[0], d, uint64(max(r.at, 0)))
}

// heldOutcome is the Outcome of the concurrency grants made under the
// capacity in force. An Outcome does not change once it made a lease, so
// a new capacity gets a new one; the leases of every one release to l
// (owns tells them).
func (l *Limiter) heldOutcome() *ratelimit.Outcome {
	x, capacity := l.ext(), l.params().capacity
	if o := x.held.Load(); o != nil && o.Limit == capacity {
		return o
	}
	o := &ratelimit.Outcome{Limit: capacity, Releaser: (*releaser)(l)}
	x.held.Store(o)
	return o
}

// owns reports whether lease is a concurrency grant of l, and its token.
func (l *Limiter) owns(lease ratelimit.Lease) (token uint64, ok bool) {
	o := lease.Outcome()
	if o == nil || o.Releaser != (*releaser)(l) {
		return 0, false
	}
	return o.Token(lease)
}

// Reconfigure applies cfg, a config of the limiter's algorithm, to this
// process's next calls (see control.Reconfigure); every process that
// shares the keys applies it from its next call once it has reconfigured
// (a policy store tells them: see package policy), and decides with the
// old one until then. The state in Redis carries over as the script reads
// it with the new parameters, by each algorithm's rule: a token bucket
// keeps its tokens (clamped to the new burst at its next refill) and its
// reservations, and refills the time since its last decision at the new
// rate (package memory refills it at the old rate up to the change: see
// package tokenbucket), and after a switch between continuous (Rate) and
// interval (Period) refill, or a change of Period, keeps its whole tokens,
// refills nothing for the time before the change and restarts its refill
// clock at the change; a fixed window's
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
		pm.tag(pm.infos[0].Grows.(*grantTag).g, s) // its grants are s's limiters'
		s.p.Store(pm)
	}
	return nil
}

// Reset puts the limiter's state in Redis back to its initial state (see
// control.Reset), for every process: its keys are deleted, in one
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

// Backend returns "redis": the backend's name, as metrics label it.
func (l *Limiter) Backend() string { return "redis" }

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
