// Package memory runs limitkit's algorithms in the process: state in memory,
// one mutex per limiter, and a Wait queue woken by one timer per limiter.
//
// memory.New(cfg) accepts the Config of any algorithm package (tokenbucket,
// fixedwindow, slidingwindow, slidinglog, concurrency). The redis package's
// redis.New(client, key, cfg) takes the same configs and makes the same
// decisions, with the state shared by every process. NewFactory makes many
// small limiters of one config, for example one per partition of a
// partitioned limiter.
//
// Time is read from the monotonic clock against a fixed base instant (cheaper
// than time.Now, and immune to wall-clock jumps), so instants are nanoseconds
// since the Unix epoch as of the process start. WithClock injects a fake clock.
package memory

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

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

// Limiter is an in-memory limiter. Besides ratelimit.Limiter it reports
// Stats, how long it has been idle, takes grants back (Refund), reports the
// Waits that queue (ratelimit.ObservableWaiter), and can be closed.
type Limiter interface {
	ratelimit.Limiter
	ratelimit.ObservableWaiter
	// Refund takes back a grant of permits this limiter made, as
	// ratelimit.Refunder says: its permits, and its count in Stats'
	// Granted; for a concurrency lease it is Release, which counts the
	// grant out of Granted too the first time (a lease of another limiter
	// is released, and counts nothing here). ctx must not be nil
	// (ratelimit.ErrNilContext) and is not read otherwise: nothing here
	// waits, and a done ctx still gives the permits back.
	Refund(ctx context.Context, lease ratelimit.Lease, permits int) error
	// CheckPermits reports the error Acquire and Wait return for permits
	// whatever the state (ratelimit.PermitChecker): a negative permits,
	// or more than the capacity of the configuration in force.
	CheckPermits(permits int) error
	// Stats returns a snapshot of the limiter's counters.
	Stats() ratelimit.Stats
	// IdleFor reports how long the limiter has been back in its initial state
	// (full bucket, empty window, nothing held, nobody waiting); ok is false
	// when it is not idle now. Replacing an idle limiter by a new one changes
	// no decision.
	IdleFor() (d time.Duration, ok bool)
	// Close refuses every queued waiter (ReasonClosed); later calls return
	// ratelimit.ErrClosed and releases do nothing. It is safe to call twice.
	Close() error
	// Reconfigure applies a config of the same algorithm from the next
	// decision, as ratelimit.Reconfigurer says, carrying the state over:
	// the permits a rate algorithm has in use stay in use, taken at the
	// instant of the change (a token bucket keeps its tokens, clamped to
	// the new burst, and its debt; a window's count is held against the new
	// limit until the window in which the change falls ends); a concurrency
	// limit's holders keep their permits. The limiters of a Factory share
	// their configuration: reconfiguring one reconfigures all. On a closed
	// limiter it returns ratelimit.ErrClosed and changes nothing, for the
	// limiters that share its configuration too.
	Reconfigure(cfg ratelimit.Config) error
	// Reset puts the limiter back in its initial state, as
	// ratelimit.Resetter says.
	Reset(ctx context.Context) error
}

// Option configures New.
type Option func(*options)

type options struct{ clock ratelimit.Clock }

// WithClock makes the limiter read time and set timers from c instead of the
// system's monotonic clock. For tests: see ratelimittest.Clock.
func WithClock(c ratelimit.Clock) Option { return func(o *options) { o.clock = c } }

// New returns an in-memory limiter for cfg, which must be one of the
// algorithm packages' Config values (or pointers to them).
func New(cfg ratelimit.Config, opts ...Option) (Limiter, error) {
	b, err := newBuilder(cfg, apply(opts))
	if err != nil {
		return nil, err
	}
	return b.first(), nil
}

// Factory makes in-memory limiters that share one validated config. Each
// limiter it makes is one allocation of its own state only (96 bytes for a
// token bucket, 80 for a fixed window, where New allocates the shared
// part too), which suits partitioned limiters with many keys. A Factory is
// safe for concurrent use.
type Factory struct{ b builder }

// NewFactory validates cfg (see New) and returns a factory of limiters for it.
func NewFactory(cfg ratelimit.Config, opts ...Option) (*Factory, error) {
	b, err := newBuilder(cfg, apply(opts))
	if err != nil {
		return nil, err
	}
	return &Factory{b: b}, nil
}

// New returns a new limiter, in its initial state.
func (f *Factory) New() Limiter { return f.b.next() }

// Reconfigure applies cfg, a config of the factory's algorithm, to every
// limiter the factory made and makes (see Limiter.Reconfigure).
func (f *Factory) Reconfigure(cfg ratelimit.Config) error { return f.b.first().Reconfigure(cfg) }

// ForKey is New with the signature of partitioned.Config's New: every key
// gets its own limiter of the factory's config.
func (f *Factory) ForKey(string) (ratelimit.Limiter, error) { return f.b.next(), nil }

// builder makes the limiters of one config: first is the limiter allocated
// with the shared part, next allocates a new one.
type builder interface {
	first() Limiter
	next() Limiter
}

func newBuilder(cfg ratelimit.Config, o options) (builder, error) {
	c, err := newConf(cfg)
	if err != nil {
		return nil, err
	}
	return c.builder(o), nil
}

// anyConf is a *conf[S] of some algorithm's state S.
type anyConf interface {
	builder(o options) builder
}

// newConf validates cfg and returns its conf.
func newConf(cfg ratelimit.Config) (anyConf, error) {
	if err := check.Config("memory", cfg); err != nil {
		return nil, err
	}
	cfg = check.Value(cfg)
	switch c := cfg.(type) {
	case tokenbucket.Config:
		m, err := tokenbucket.NewModel(c)
		return makeConf[tokenbucket.State](&m, err, c)
	case fixedwindow.Config:
		m, err := fixedwindow.NewModel(c)
		return makeConf[fixedwindow.State](&m, err, c)
	case slidingwindow.Config:
		m, err := slidingwindow.NewModel(c)
		return makeConf[slidingwindow.State](&m, err, c)
	case slidinglog.Config:
		m, err := slidinglog.NewModel(c)
		return makeConf[slidinglog.State](&m, err, c)
	case concurrency.Config:
		m, err := concurrency.NewModel(c)
		return makeConf[concurrency.State](&m, err, c)
	}
	return nil, fmt.Errorf("%w: memory: unsupported config type %T", ratelimit.ErrInvalidConfig, cfg)
}

// model is what every algorithm package's Model provides.
type model[S any] interface {
	Initial() S
	Step(s S, now, permits int64) (S, ratelimit.Decision)
	Available(s S, now int64) int64
	InitialAt(s S) int64
}

// reserver is a model whose Wait takes permits ahead of time (token bucket).
type reserver[S any] interface {
	Reserve(s S, now, permits int64) (next S, due int64, ok bool)
	When(s S, now, need int64) int64
}

// refunder is a model that can take back permits granted at an instant
// (the rate algorithms): a cancelled reservation's, or a rolled back grant.
type refunder[S any] interface {
	Refund(s S, now, at, permits int64) S
	// Made is the instant a decision read at now, which left s, was made
	// at: the token of a grant's lease.
	Made(s S, now int64) int64
}

// cloner is a model whose states share memory (a log behind a pointer),
// which Step changes in place: Clone makes a copy to try decisions on.
type cloner[S any] interface {
	Clone(s S) S
}

// holder is a model of a rate algorithm, which can make the state in which
// a number of permits were taken at an instant: how a reconfigured limiter
// carries its count over.
type holder[S any] interface {
	Used(s S, now int64) int64
	Holding(now, used int64) S
}

// releaser is a model whose permits come back on Release (concurrency).
type releaser[S any] interface {
	Release(s S, now, permits int64) S
}

// timeless is a model whose decisions do not depend on time (concurrency).
type timeless interface{ Timeless() bool }

// apply collects the options; it allocates only when there are some.
func apply(opts []Option) options {
	if len(opts) == 0 {
		return options{}
	}
	o := new(options)
	for _, opt := range opts {
		opt(o)
	}
	return *o
}

// conf is one configuration of an algorithm: its model and settings,
// shared by the limiters of one New or Factory. It does not change once
// made: Reconfigure replaces it by another, in cur.
type conf[S any] struct {
	cur      *atomic.Pointer[conf[S]] // the current configuration of the limiters that share this one
	clock    ratelimit.Clock          // nil: the monotonic clock
	cfg      ratelimit.Config         // what it was made from (a value, not a pointer)
	model    model[S]
	reserver reserver[S] // nil unless the model reserves
	refunder refunder[S] // nil unless the model takes grants back
	releaser releaser[S] // nil unless the model holds permits
	cloner   cloner[S]   // nil when a state's copy is independent
	holder   holder[S]   // nil unless the model is a rate algorithm's
	timeless bool        // the model's decisions do not read the time
	capacity int64
	queue    ratelimit.Queue
	infos    leases.Infos
}

// makeConf makes the conf of m, a pointer to an algorithm's Model, made
// from cfg.
func makeConf[S any](m model[S], err error, cfg ratelimit.Config) (*conf[S], error) {
	if err != nil {
		return nil, err
	}
	c := &conf[S]{model: m, cfg: cfg, capacity: cfg.Capacity(), queue: cfg.QueueOptions(), infos: leases.MakeInfos(cfg.Capacity())}
	mp := any(m)
	c.reserver, _ = mp.(reserver[S])
	c.refunder, _ = mp.(refunder[S])
	c.releaser, _ = mp.(releaser[S])
	c.cloner, _ = mp.(cloner[S])
	c.holder, _ = mp.(holder[S])
	if t, ok := mp.(timeless); ok {
		c.timeless = t.Timeless()
	}
	return c, nil
}

// pair is a limiter allocated with the current configuration of the
// limiters of one New or Factory, as New makes its first.
type pair[S any] struct {
	l   limiter[S]
	cur atomic.Pointer[conf[S]]
}

func (c *conf[S]) builder(o options) builder {
	p := &pair[S]{}
	c.cur, c.clock = &p.cur, o.clock
	p.cur.Store(c)
	p.l.init(c)
	return p
}

func (p *pair[S]) first() Limiter { return &p.l }

func (p *pair[S]) next() Limiter {
	l := new(limiter[S])
	l.init(p.cur.Load())
	return l
}

func (l *limiter[S]) init(c *conf[S]) {
	l.c.Store(c)
	l.state = c.model.Initial()
	l.emptied = l.now()
}

// start is the base instant of the monotonic clock; startUnix its Unix time.
var (
	start     = time.Now()
	startUnix = start.UnixNano()
)

// limiter is the engine shared by all algorithms: the state of one limiter,
// kept small (a partitioned limiter holds many). Every field below mu is
// guarded by mu.
type limiter[S any] struct {
	// c is the configuration the state is under: written under mu (by
	// sync), read before it to see whether it is still current.
	c atomic.Pointer[conf[S]]

	mu      sync.Mutex
	closed  bool
	state   S
	head    *waiter   // oldest waiter
	x       *extra[S] // allocated on first use
	emptied int64     // last instant the queue became empty or, for releasers, nothing was held (or creation); or idleSinceUnknown
	granted uint64
	refused uint64
}

// extra is the state only queues and releases need.
type extra[S any] struct {
	tail    *waiter // newest waiter
	queued  int64   // permits queued
	timer   ratelimit.Timer
	timerAt int64      // instant the timer is set for; 0 when not set
	free    *handle[S] // released handles, for reuse
	resets  uint64     // Resets of a limiter whose permits are held: a handle of an older one holds nothing
	// gen counts the changes of the queue and of what it waits for (a
	// waiter in or out, a refund, a release); behind caches behindQueue's
	// answer for the generation it was computed in.
	gen    uint64
	behind behind
}

// behind is behindQueue's answer for p permits: the instant at which they
// could be had behind the queue, or -1 when unknown.
type behind struct {
	gen, p, at int64
}

// checkPermits checks permits against the current configuration, which
// the state may not have been carried over to yet: a capacity raised by
// Reconfigure admits what it admits.
func (l *limiter[S]) checkPermits(permits int) error {
	return base.CheckPermits(permits, l.conf().cur.Load().capacity)
}

func (l *limiter[S]) CheckPermits(permits int) error { return l.checkPermits(permits) }

// conf is the configuration l's state is under.
func (l *limiter[S]) conf() *conf[S] { return l.c.Load() }

// ext returns l.x, allocating it on first use. Requires l.mu.
func (l *limiter[S]) ext() *extra[S] {
	if l.x == nil {
		l.x = new(extra[S])
	}
	return l.x
}

// queued is the number of permits queued. Requires l.mu.
func (l *limiter[S]) queued() int64 {
	if l.x == nil {
		return 0
	}
	return l.x.queued
}

// now requires nothing; under mu its readings never go backwards.
func (l *limiter[S]) now() int64 {
	if l.conf().clock == nil {
		return startUnix + int64(time.Since(start))
	}
	return l.conf().clock.Now().UnixNano()
}

// until is the time left before deadline.
func (l *limiter[S]) until(deadline time.Time) time.Duration {
	if l.conf().clock == nil {
		return time.Until(deadline)
	}
	return deadline.Sub(l.conf().clock.Now())
}

// waiter is one queued Wait. Its fields are guarded by the limiter's mu,
// except ch, which receives the answer exactly once.
type waiter struct {
	permits    int64 // 0: a status check, answered once a permit is available
	due        int64 // reservations: when the reserved tokens have arrived
	at         int64 // when it joined the queue
	prev, next *waiter
	queued     bool
	ch         chan ratelimit.Lease
}

// Acquire's and Wait's common case (nothing queued, the limiter open) is
// decided at once. Like x/time/rate, it reads the time before taking the
// lock, which keeps the critical section short under contention. Another
// goroutine may then decide at a later instant first; every model takes an
// instant older than its state's as that state's own (the token bucket
// refills nothing for it, windows count it in their newest segment or
// window, the sliding log records it at its newest entry), so it is never
// granted more than a moment later would be.
//
// The configuration is read before the lock too: a call that finds it
// replaced under the lock (Reconfigure) takes the slow path, which
// carries the state over to it first.
func (l *limiter[S]) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	c := l.conf()
	if permits < 0 || int64(permits) > c.capacity {
		if err := l.checkPermits(permits); err != nil {
			return ratelimit.Lease{}, err
		}
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	var now int64
	if !c.timeless {
		now = l.now()
	}
	l.mu.Lock()
	if l.closed || l.head != nil || c.cur.Load() != c {
		l.mu.Unlock()
		return l.acquireSlow(int64(permits))
	}
	lease := l.take(now, int64(permits))
	l.mu.Unlock()
	return lease, nil
}

// acquireSlow is Acquire on a closed limiter, a non-empty queue or a
// configuration just replaced.
func (l *limiter[S]) acquireSlow(p int64) (ratelimit.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	if p > l.conf().capacity { // the capacity may have shrunk
		return ratelimit.Lease{}, base.CheckPermits(int(p), l.conf().capacity)
	}
	if l.head != nil {
		l.serve(now)
		if l.behind(p) {
			return l.refuse(l.behindQueue(now, p), p, ratelimit.ReasonLimit), nil
		}
	}
	return l.take(now, p), nil
}

// behind reports whether a new request of p permits must wait behind the
// queue: a new request never overtakes a non-empty OldestFirst queue,
// except a status check (p == 0, which takes nothing) and, without a
// limit (rate.Inf, the waiters queued before it), any request: there is
// nothing to wait for. Requires l.mu.
func (l *limiter[S]) behind(p int64) bool {
	return l.head != nil && l.conf().queue.Order == ratelimit.OldestFirst && p > 0 && l.conf().capacity != leases.Unlimited
}

// Wait takes permits, queueing when they are not available now. Wait(ctx,
// 0) waits until at least one permit is available and takes nothing; it
// queues (behind the waiters already there) whatever the queue limit,
// since it holds no permits.
func (l *limiter[S]) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return l.WaitObserved(ctx, permits, nil)
}

// WaitObserved is Wait, telling o (when not nil) of the time the call spends
// in the queue, as ratelimit.ObservableWaiter says.
func (l *limiter[S]) WaitObserved(ctx context.Context, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	c := l.conf()
	if permits < 0 || int64(permits) > c.capacity {
		if err := l.checkPermits(permits); err != nil {
			return ratelimit.Lease{}, err
		}
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	var now int64 // read before the lock, as in Acquire
	if !c.timeless {
		now = l.now()
	}
	l.mu.Lock()
	if !l.closed && l.head == nil && c.cur.Load() == c {
		if d := l.step(now, int64(permits)); d.Granted {
			lease := l.lease(d, now, int64(permits))
			l.mu.Unlock()
			return lease, nil
		}
	}
	l.mu.Unlock()
	w, lease, err := l.enqueue(ctx, int64(permits))
	if w == nil {
		return lease, err
	}
	if o == nil {
		return l.await(ctx, w)
	}
	o.Queued(ctx, permits)
	lease, err = l.await(ctx, w)
	o.Dequeued(ctx, permits, time.Duration(max(l.now()-w.at, 0)), lease, err)
	return lease, err
}

// await waits for the answer of w, a queued waiter, until ctx is done; a
// waiter cancelled leaves the queue, and what it reserved comes back.
func (l *limiter[S]) await(ctx context.Context, w *waiter) (ratelimit.Lease, error) {
	select {
	case lease := <-w.ch:
		return lease, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if !w.queued { // answered in the meantime: the answer stands
		l.mu.Unlock()
		return <-w.ch, nil
	}
	now := l.now()
	l.sync(now)
	if !w.queued { // refused by the new configuration
		l.mu.Unlock()
		return <-w.ch, nil
	}
	l.remove(w, now)
	if l.conf().reserver != nil && w.permits > 0 {
		l.state = l.conf().refunder.Refund(l.state, now, now, w.permits)
		l.redue(now)
	}
	l.serve(now) // the waiters behind it may fit now
	l.mu.Unlock()
	return ratelimit.Lease{}, ctx.Err()
}

// enqueue answers at once (w == nil) or queues a waiter.
func (l *limiter[S]) enqueue(ctx context.Context, p int64) (w *waiter, lease ratelimit.Lease, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, lease, ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	if p > l.conf().capacity { // the capacity may have shrunk
		return nil, lease, base.CheckPermits(int(p), l.conf().capacity)
	}
	l.serve(now)
	var d ratelimit.Decision
	if !l.behind(p) {
		if d = l.step(now, p); d.Granted {
			return nil, l.lease(d, now, p), nil
		}
	}
	if l.head != nil && l.conf().queue.Order == ratelimit.OldestFirst {
		d = l.behindQueue(now, p)
	}
	limit := check.QueueLimit(l.conf().queue)
	if p > limit || (l.conf().queue.Order == ratelimit.OldestFirst && l.queued()+p > limit) {
		return nil, l.refuse(d, p, ratelimit.ReasonQueueFull), nil
	}
	// NewestFirst: the oldest waiters, up to last, must go to make room.
	var last *waiter
	for e, room := l.head, l.queued()+p-limit; room > 0; e = e.next {
		room -= e.permits
		last = e
	}
	state := l.state
	w = &waiter{permits: p, at: now, ch: make(chan ratelimit.Lease, 1)}
	if l.conf().reserver != nil {
		for e := l.head; last != nil && e != last.next; e = e.next {
			state = l.conf().refunder.Refund(state, now, now, e.permits)
		}
		if p == 0 {
			w.due = l.conf().reserver.When(state, now, 1)
		} else {
			var ok bool
			if state, w.due, ok = l.conf().reserver.Reserve(state, now, p); !ok {
				return nil, l.refuse(d, p, ratelimit.ReasonQueueFull), nil
			}
		}
		d.RetryAfter = time.Duration(w.due - now)
	}
	if deadline, ok := ctx.Deadline(); ok && d.RetryAfter >= 0 && l.until(deadline) < d.RetryAfter {
		return nil, l.refuse(d, p, ratelimit.ReasonDeadline), nil
	}
	evicted := last != nil
	for last != nil {
		e := l.head
		l.remove(e, now)
		l.answer(e, l.refuse(d, e.permits, ratelimit.ReasonEvicted))
		if e == last {
			break
		}
	}
	l.state = state
	l.push(w)
	if l.conf().reserver != nil && evicted {
		l.redue(now) // the evicted reservations' tokens came back
	}
	l.serve(now)
	return w, lease, nil
}

// redue moves the reservations' due instants forward after tokens came
// back (a cancel or an eviction): each is due when the bucket has repaid
// all but the permits reserved behind it. A due instant only moves
// earlier, so the instant a waiter was told still holds. Requires l.mu and
// a reserver.
func (l *limiter[S]) redue(now int64) {
	var owed int64 // permits reserved behind w
	for w := l.x.tail; w != nil; w = w.prev {
		need := -owed
		if w.permits == 0 {
			need++ // a status check waits for one token beyond them
		}
		w.due = min(w.due, l.conf().reserver.When(l.state, now, need))
		owed += w.permits
	}
}

// behindQueue is the refusal of p permits that would wait behind the whole
// queue: its RetryAfter is when the queued permits and then p could all be
// had, each waiter served in order as soon as it can be. It changes no
// state but dropping what left the window. Requires l.mu, and that the
// queue's first waiter cannot be served now.
func (l *limiter[S]) behindQueue(now, p int64) ratelimit.Decision {
	m := l.conf().model
	var d ratelimit.Decision
	l.state, d = m.Step(l.state, now, 0) // the figures of now
	d.Granted = false
	if l.conf().reserver != nil { // the state holds the queue's reservations
		d.RetryAfter = time.Duration(l.conf().reserver.When(l.state, now, max(p, 1)) - now)
		return d
	}
	// The answer holds until the queue or what it waits for changes: a
	// flood of refusals behind an unchanged queue reuses it, rather than
	// copying a log and replaying the queue on every one.
	x := l.x
	if x.behind.gen != int64(x.gen) || x.behind.p != p {
		x.behind = behind{gen: int64(x.gen), p: p, at: l.replayQueue(now, p)}
	}
	d.RetryAfter = -1
	if x.behind.at >= 0 {
		d.RetryAfter = time.Duration(max(x.behind.at-now, 0))
	}
	return d
}

// replayQueue serves the queue, then p permits, on a copy of the state,
// each as soon as it can be, and returns the instant p is served; -1 when
// unknown (permits that come back on Release). Requires l.mu.
func (l *limiter[S]) replayQueue(now, p int64) int64 {
	m := l.conf().model
	st := l.state
	if l.conf().cloner != nil {
		st = l.conf().cloner.Clone(st)
	}
	t := now
	for w := l.head; ; w = w.next {
		want := p
		if w != nil {
			want = w.permits
		}
		// Each waiter is granted once RetryAfter has passed: RetryAfter is
		// exact, so the second try succeeds (the third is a safeguard).
		granted := false
		for try := 0; try < 3 && !granted; try++ {
			var g ratelimit.Decision
			if st, g = m.Step(st, t, want); g.Granted {
				granted = true
			} else if g.RetryAfter < 0 {
				return -1
			} else {
				t += int64(g.RetryAfter)
			}
		}
		if !granted || w == nil {
			return t
		}
	}
}

// take decides p permits now. Requires l.mu. It calls the model itself
// rather than through step, which the compiler does not inline here: a
// nanosecond of Acquire's 55 (BenchmarkTokenBucket in the bench module,
// against x/time/rate).
func (l *limiter[S]) take(now, p int64) ratelimit.Lease {
	var d ratelimit.Decision
	l.state, d = l.conf().model.Step(l.state, now, p)
	return l.lease(d, now, p)
}

// step decides p permits now, counting nothing and making no lease. The
// state moves forward on a refusal too (segments that left the window),
// which must be kept. Requires l.mu.
func (l *limiter[S]) step(now, p int64) ratelimit.Decision {
	var d ratelimit.Decision
	l.state, d = l.conf().model.Step(l.state, now, p)
	return d
}

// lease counts a decision on p permits made at now and makes its lease: a
// grant's, whose token is the handle's generation for a releaser and the
// instant of the grant otherwise (Refund reads it), or a refusal's
// (ReasonLimit). A status check (p == 0) is not counted. Requires l.mu.
func (l *limiter[S]) lease(d ratelimit.Decision, now, p int64) ratelimit.Lease {
	if !d.Granted {
		return l.refuse(d, p, ratelimit.ReasonLimit)
	}
	if p == 0 {
		return backend.Grant(&l.conf().infos[0], d, 0)
	}
	l.granted++
	if l.conf().releaser != nil {
		h := l.handle(p)
		return backend.Grant(&h.info, d, h.gen)
	}
	return backend.Grant(&l.conf().infos[0], d, uint64(l.made(now)))
}

// made is the instant the decision just made at now was made at, which a
// grant's lease carries for Refund. Requires l.mu.
func (l *limiter[S]) made(now int64) int64 {
	if l.conf().refunder == nil {
		return now
	}
	return l.conf().refunder.Made(l.state, now)
}

// refuse counts a refusal of p permits (a status check, p == 0, is not
// counted) and makes its lease. Requires l.mu.
func (l *limiter[S]) refuse(d ratelimit.Decision, p int64, r ratelimit.Reason) ratelimit.Lease {
	d.Granted = false
	if p > 0 {
		l.refused++
	}
	return backend.Lease(&l.conf().infos, d, r, 0)
}

// handle returns a handle for a lease of p permits, reused from the free
// list when one is there. Requires l.mu.
func (l *limiter[S]) handle(p int64) *handle[S] {
	x := l.ext()
	h := x.free
	if h != nil && h.info.Limit() != l.conf().capacity {
		x.free = nil // made under a replaced configuration: leases keep their figures
		h = nil
	}
	if h == nil {
		h = &handle[S]{owner: l}
		h.info = leases.GrantInfo(l.conf().capacity, h)
	} else {
		x.free, h.next = h.next, nil
	}
	h.permits, h.resets = p, x.resets
	return h
}

// serve grants queued waiters, in queue order, while they fit, and sets the
// timer for the first one that does not. Requires l.mu.
func (l *limiter[S]) serve(now int64) {
	for l.head != nil {
		w := l.head
		if l.conf().queue.Order == ratelimit.NewestFirst && l.conf().reserver == nil {
			w = l.x.tail
		}
		var d ratelimit.Decision
		if l.conf().reserver != nil {
			if w.due > now {
				l.arm(now, w.due)
				return
			}
			_, d = l.conf().model.Step(l.state, now, 0) // the figures after the reservation
			d.Granted = true
			if w.permits > 0 { // the reservation took its tokens; count it
				l.granted++
				l.remove(w, now)
				l.answer(w, backend.Grant(&l.conf().infos[0], d, uint64(l.made(now))))
				continue
			}
		} else {
			var st S
			st, d = l.conf().model.Step(l.state, now, w.permits)
			l.state = st
			if !d.Granted {
				if d.RetryAfter >= 0 {
					l.arm(now, now+int64(d.RetryAfter))
				}
				return
			}
		}
		l.remove(w, now)
		l.answer(w, l.lease(d, now, w.permits))
	}
}

// arm sets the limiter's one timer to fire at instant at. Requires l.mu.
func (l *limiter[S]) arm(now, at int64) {
	if l.x.timerAt == at {
		return
	}
	l.x.timerAt = at
	d := time.Duration(at - now)
	if l.x.timer == nil {
		if l.conf().clock == nil {
			l.x.timer = time.AfterFunc(d, l.fire)
		} else {
			l.x.timer = l.conf().clock.AfterFunc(d, l.fire)
		}
		return
	}
	l.x.timer.Stop()
	l.x.timer.Reset(d)
}

func (l *limiter[S]) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.x.timerAt = 0
	if !l.closed {
		now := l.now()
		l.sync(now)
		l.serve(now)
	}
}

// push appends w at the queue's newest end. Requires l.mu.
func (l *limiter[S]) push(w *waiter) {
	l.ext()
	w.prev, w.queued = l.x.tail, true
	if l.x.tail == nil {
		l.head = w
	} else {
		l.x.tail.next = w
	}
	l.x.tail = w
	l.x.queued += w.permits
	l.x.gen++
}

// remove unlinks w from the queue. Requires l.mu.
func (l *limiter[S]) remove(w *waiter, now int64) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.x.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	l.x.queued -= w.permits
	l.x.gen++
	if l.head == nil {
		l.emptied = now
	}
}

// isClosed reports whether Close was called.
func (l *limiter[S]) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// answer hands a waiter its lease; ch is buffered, so this never blocks.
func (l *limiter[S]) answer(w *waiter, lease ratelimit.Lease) { w.ch <- lease }

func (l *limiter[S]) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	c := l.conf() // whether it releases or refunds: the algorithm's, which no Reconfigure changes
	// A lease holds what it holds, whatever the capacity now: a release
	// checks no capacity.
	if permits < 0 || c.releaser == nil && int64(permits) > c.capacity {
		if err := l.checkPermits(permits); err != nil {
			return err
		}
	}
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if l.isClosed() {
		return ratelimit.ErrClosed
	}
	if c.releaser != nil {
		if h, ok := leases.Lease(lease).Releaser().(*handle[S]); ok && h.owner == l {
			token, _ := backend.Token(lease, &h.info)
			l.giveBack(h, token, true)
		} else {
			lease.Release()
		}
		return nil
	}
	if c.refunder == nil || permits == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	// A grant made under a configuration since replaced is not recognised:
	// it is not given back (stricter, never looser).
	at, ok := backend.Token(lease, &l.conf().infos[0])
	if !ok {
		return nil
	}
	l.state = l.conf().refunder.Refund(l.state, now, int64(at), int64(permits))
	if l.granted > 0 { // as if the request had not been made
		l.granted--
	}
	if l.x != nil {
		l.x.gen++
	}
	if l.head != nil {
		if l.conf().reserver != nil {
			l.redue(now)
		}
		l.serve(now)
	}
	return nil
}

func (l *limiter[S]) Stats() ratelimit.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sync(now)
	return ratelimit.Stats{
		Available: max(0, l.conf().model.Available(l.state, now)),
		Queued:    l.queued(),
		Granted:   l.granted,
		Refused:   l.refused,
	}
}

// idleSinceUnknown marks a limiter whose permits all came back at an instant
// not read (to keep the clock off the Release path): the first IdleFor
// counts from its own call, a lower bound.
const idleSinceUnknown = math.MinInt64

func (l *limiter[S]) IdleFor() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head != nil {
		return 0, false
	}
	now := l.now()
	l.sync(now)
	if l.emptied == idleSinceUnknown {
		l.emptied = now
	}
	at := max(l.conf().model.InitialAt(l.state), l.emptied)
	if at == math.MaxInt64 || now < at {
		return 0, false
	}
	return time.Duration(now - at), true
}

func (l *limiter[S]) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.x != nil && l.x.timer != nil {
		l.x.timer.Stop()
	}
	now := l.now()
	for l.head != nil {
		w := l.head
		l.remove(w, now)
		l.answer(w, l.refuse(ratelimit.Decision{RetryAfter: -1}, w.permits, ratelimit.ReasonClosed))
	}
	return nil
}

// giveBack returns the permits of the lease that holds h with token and
// recycles h, and for a refund counts its grant out of Granted; it does
// nothing when that lease was released already (h then has another
// generation). l.x exists: the lease's handle was made by lease.
func (l *limiter[S]) giveBack(h *handle[S], token uint64, refund bool) {
	l.mu.Lock()
	if h.gen != token {
		l.mu.Unlock()
		return
	}
	h.gen++
	if refund && l.granted > 0 {
		l.granted--
	}
	h.next, l.x.free = l.x.free, h
	l.x.gen++
	if l.closed || h.resets != l.x.resets { // closed, or forgotten by Reset
		l.mu.Unlock()
		return
	}
	var now int64
	if !l.conf().timeless || l.head != nil {
		now = l.now()
	}
	l.sync(now) // concurrency: the holders carry over as they are
	l.state = l.conf().releaser.Release(l.state, now, h.permits)
	if l.head != nil {
		l.serve(now)
	}
	if l.head == nil {
		// Perhaps nothing is held now: IdleFor reads the clock when asked
		// (a lower bound of the time since), where a release would read it
		// and ask the model every time.
		l.emptied = idleSinceUnknown
	}
	l.mu.Unlock()
}

// sync carries the state over to the current configuration, when
// Reconfigure replaced the one it is under. Requires l.mu.
func (l *limiter[S]) sync(now int64) {
	old := l.conf()
	c := old.cur.Load()
	if c == old {
		return
	}
	l.state = carry(old, c, l.state, now)
	l.c.Store(c)
	if l.x != nil {
		l.x.gen++ // behindQueue's cached answer was under the old one
	}
	// A waiter for more than the new capacity could never be served, and
	// would hold up the queue behind it: it is refused, and a reservation's
	// tokens come back.
	dropped := false
	for w := l.head; w != nil && c.capacity < old.capacity; {
		next := w.next
		if w.permits > c.capacity {
			l.remove(w, now)
			if c.reserver != nil {
				l.state = c.refunder.Refund(l.state, now, now, w.permits)
				dropped = true
			}
			l.answer(w, l.refuse(ratelimit.Decision{RetryAfter: -1}, w.permits, ratelimit.ReasonLimit))
		}
		w = next
	}
	if dropped {
		l.redue(now)
	}
}

// carry is state s, under configuration old, carried over to c at now.
// A concurrency limit's holders keep their permits (s unchanged). A token
// bucket keeps the whole tokens it has at now, clamped to the new burst,
// or its debt. A window's permits in use at now (Used: its count, even
// above a limit) are taken at now from a new state of c: they stay in
// use, held against the new limit, and come back no sooner than they would
// have (with the window, or segment, in which now falls). Either way no
// more is available after the change than the old configuration had, or
// the new one allows. A token bucket of rate.Inf reads no state: the
// bucket is kept as it was, and the next configuration starts full, less
// the debt it still owes to reservations queued before (the kept state's
// refill mode may not be the next one's: only its debt is read).
func carry[S any](old, c *conf[S], s S, now int64) S {
	if c.releaser != nil || c.capacity == leases.Unlimited {
		return s
	}
	var used int64
	switch {
	case old.capacity == leases.Unlimited: // a full bucket, less the debt kept under rate.Inf
		if used = old.holder.Used(s, now); used > 0 {
			used += c.capacity
		}
	case c.reserver != nil:
		// A token bucket keeps its tokens, clamped to the new burst (as
		// x/time/rate's SetBurst), and its debt (queued reservations).
		used = c.capacity - min(old.capacity-old.holder.Used(s, now), c.capacity)
	default:
		used = old.holder.Used(s, now)
	}
	if used <= 0 {
		return c.model.Initial()
	}
	return c.holder.Holding(now, used)
}

// Reconfigure applies cfg, a config of the limiter's algorithm, from the
// next decision (see ratelimit.Reconfigurer). A Factory's limiters share
// their configuration: reconfiguring one reconfigures all, each carrying
// its state over at its next call (this one at once). Queued waiters are
// examined again at once; a token bucket's reservations keep the instants
// they were given; a waiter for more permits than the new capacity is
// refused (ReasonLimit, RetryAfter unknown). Applying the config in force
// again changes nothing but carrying this limiter's state over to it.
func (l *limiter[S]) Reconfigure(cfg ratelimit.Config) error {
	ac, err := newConf(cfg)
	if err != nil {
		return err
	}
	c, ok := ac.(*conf[S])
	if !ok {
		return fmt.Errorf("%w: memory: Reconfigure with a %T, of another algorithm", ratelimit.ErrInvalidConfig, cfg)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed // and the limiters that share its configuration keep it
	}
	if cur := l.conf().cur.Load(); cur.cfg != c.cfg { // the config in force changes nothing
		c.cur, c.clock = cur.cur, cur.clock
		c.cur.Store(c)
	}
	now := l.now()
	l.sync(now)
	if l.head != nil {
		l.serve(now)
	}
	return nil
}

// Reset puts the limiter back in its initial state (see
// ratelimit.Resetter): a full bucket, empty windows, nothing held (the
// leases held before give nothing back when released); the queued waiters
// are examined again (a token bucket's reservations are taken again from
// the full bucket). ctx is not read: nothing here waits.
func (l *limiter[S]) Reset(ctx context.Context) error {
	if err := base.CheckContext(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ratelimit.ErrClosed
	}
	now := l.now()
	l.sync(now)
	if l.conf().releaser != nil {
		l.ext().resets++ // the leases held now give nothing back
	}
	l.state = l.conf().model.Initial()
	if l.x != nil {
		l.x.gen++
	}
	if l.head == nil {
		return nil
	}
	if l.conf().reserver != nil {
		for w := l.head; w != nil; w = w.next {
			if w.permits > 0 {
				l.state, _, _ = l.conf().reserver.Reserve(l.state, now, w.permits)
			}
		}
		l.redue(now)
	}
	l.serve(now)
	return nil
}

// handle is the Releaser of a concurrency lease. Released handles go on the
// limiter's free list and are reused; gen tells the lease that owns a handle
// from older copies, which makes Release idempotent without an allocation
// per lease. gen, permits and next are guarded by the owner's mu, which
// Release takes anyway, so it costs no atomic operation of its own.
type handle[S any] struct {
	gen     uint64
	resets  uint64 // the owner's resets when it was handed out
	permits int64
	next    *handle[S]
	owner   *limiter[S]
	info    leases.Info // of the leases that hold it
}

func (h *handle[S]) Release(token uint64) { h.owner.giveBack(h, token, false) }
