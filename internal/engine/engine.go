// Package engine runs an algorithm's reference model in the process: the
// memory backend's limiter, one mutex per limiter and a Wait queue woken by
// one timer per limiter, generic over the model's state. The memory package
// is its public face; internal/algo binds each algorithm's model to it.
//
// Time is read from the monotonic clock against a fixed base instant (cheaper
// than time.Now, and immune to wall-clock jumps), so instants are nanoseconds
// since the Unix epoch as of the process start. A Clock given to Make
// replaces it.
package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// Limiter is what the engine's limiters implement; memory.Limiter, which
// has the same methods, documents them.
type Limiter interface {
	ratelimit.Limiter
	Refund(ctx context.Context, lease ratelimit.Lease, permits int) error
	Settle(ctx context.Context, lease ratelimit.Lease, actual int) error
	CheckPermits(permits int) error
	Stats() ratelimit.Stats
	Backend() string
	IdleFor() (d time.Duration, ok bool)
	Close() error
	Reconfigure(cfg ratelimit.Config) error
	Reset(ctx context.Context) error
}

// Builder makes the limiters of one configuration: First is the limiter
// allocated with the part they share, Next allocates a new one in its
// initial state. Reconfiguring any of them reconfigures all. Keyed makes a
// store of a state per key instead (see keyed.go); it uses the Builder's
// configuration, and First and Next are then not to be used.
type Builder interface {
	First() Limiter
	Next() Limiter
	Keyed(idleTimeout time.Duration, maxKeys int64) Keyed
}

// Model is an algorithm's reference model over its state S: a pure step
// function with no locks and no I/O, which the engine runs under its
// mutex. Instants are nanoseconds since the Unix epoch. Every model has
// every method; Caps says which of the optional ones apply, and the others
// are never called (embed Defaults for them).
type Model[S any] interface {
	// Initial is the state of a new limiter.
	Initial() S
	// Step decides a request of permits at now, and returns the state after it.
	Step(s S, now, permits int64) (S, backend.Decision)
	// Available is the number of permits that could be granted at now.
	Available(s S, now int64) int64
	// InitialAt is the instant from which s decides as Initial does.
	InitialAt(s S) int64
	// Caps says which optional methods apply.
	Caps() Caps

	// Reserve takes permits ahead of time, due when they have arrived;
	// ok is false when they never could (Reserves).
	Reserve(s S, now, permits int64) (next S, due int64, ok bool)
	// When is the instant at which need permits are available (Reserves).
	When(s S, now, need int64) int64
	// Refund takes back permits granted at the instant at (Refunds).
	Refund(s S, now, at, permits int64) S
	// Made is the instant a decision read at now, which left s, was made
	// at: the token of a grant's lease (Refunds).
	Made(s S, now int64) int64
	// Clone copies a state whose memory Step changes in place (Clones).
	Clone(s S) S
	// Used is the number of permits in use at now, and Holding the state in
	// which used permits were taken at now: how a reconfigured limiter
	// carries its count over (Holds).
	Used(s S, now int64) int64
	Holding(now, used int64) S
	// Release gives back permits held (Releases).
	Release(s S, now, permits int64) S
	// Charge takes permits at now without refusing, beyond the limit if
	// need be (a token bucket in debt, a window over its limit), for work
	// whose cost turned out larger than granted; the state then counts at
	// most check.MaxLimit permits more than the limit (Charges).
	Charge(s S, now, permits int64) S
}

// Caps is the set of a Model's optional behaviours.
type Caps uint8

const (
	Reserves Caps = 1 << iota // Wait takes permits ahead of time (token bucket): Reserve, When
	Refunds                   // a grant can be taken back (rate algorithms): Refund, Made
	Releases                  // permits come back on Release (concurrency)
	Clones                    // states share memory that Step changes in place: Clone
	Holds                     // a count carries over a reconfiguration: Used, Holding
	Timeless                  // decisions do not read the time (concurrency)
	Charges                   // a grant can be settled: Refund gives back, Charge takes more (rate algorithms)
)

// Defaults is embedded by a model for the optional methods its Caps leave
// out. The engine never calls them: each panics, naming the capability a
// model would have to declare.
type Defaults[S any] struct{}

func (Defaults[S]) Reserve(s S, now, permits int64) (S, int64, bool) { panic(lacks("Reserves")) }
func (Defaults[S]) When(s S, now, need int64) int64                  { panic(lacks("Reserves")) }
func (Defaults[S]) Refund(s S, now, at, permits int64) S             { panic(lacks("Refunds")) }
func (Defaults[S]) Made(s S, now int64) int64                        { panic(lacks("Refunds")) }
func (Defaults[S]) Clone(s S) S                                      { panic(lacks("Clones")) }
func (Defaults[S]) Used(s S, now int64) int64                        { panic(lacks("Holds")) }
func (Defaults[S]) Holding(now, used int64) S                        { panic(lacks("Holds")) }
func (Defaults[S]) Release(s S, now, permits int64) S                { panic(lacks("Releases")) }
func (Defaults[S]) Charge(s S, now, permits int64) S                 { panic(lacks("Charges")) }

func lacks(c string) string { return "engine: a method of a model without " + c + " was called" }

// checkCaps refuses caps that the engine cannot run: a model whose permits
// do not come back on Release (they come back with time) must say how many
// are in use, for a reconfiguration to carry them over (Holds); one that
// reserves must take a cancelled reservation back (Refunds), and so must
// one that settles a grant.
func checkCaps(c Caps) error {
	if c&Releases == 0 && c&Holds == 0 || c&(Reserves|Charges) != 0 && c&Refunds == 0 {
		return fmt.Errorf("engine: a model's Caps %#x are not a combination the engine runs", uint8(c))
	}
	return nil
}

// Make returns the Builder of cfg's limiters, whose model newModel makes
// from a configuration of the algorithm, on clock (nil: the monotonic
// clock). newModel validates its configuration and refuses one of another
// algorithm; Reconfigure calls it too.
func Make[S any](cfg ratelimit.Config, newModel NewModel[S], clock ratelimit.Clock) (Builder, error) {
	c, err := makeConf(cfg, newModel)
	if err != nil {
		return nil, err
	}
	p := &pair[S]{}
	c.cur, c.clock = &p.cur, clock
	p.cur.Store(c)
	p.l.init(c)
	return p, nil
}

// NewModel makes the model of a configuration of its algorithm, and the
// Grows of its grants (nil: unknown); it validates the configuration and
// refuses one of another algorithm.
type NewModel[S any] func(ratelimit.Config) (Model[S], backend.Grows, error)

// conf is one configuration of an algorithm: its model and settings,
// shared by the limiters of one Builder. It does not change once made:
// Reconfigure replaces it by another, in cur.
type conf[S any] struct {
	cur      *atomic.Pointer[conf[S]] // the current configuration of the limiters that share this one
	clock    ratelimit.Clock          // nil: the monotonic clock
	cfg      ratelimit.Config         // what it was made from (a value, not a pointer)
	model    Model[S]
	newModel NewModel[S]
	caps     Caps
	timeless bool // the model's decisions do not read the time
	capacity int64
	queue    ratelimit.Queue
	infos    backend.Outcomes
}

// makeConf makes the conf of cfg's model.
func makeConf[S any](cfg ratelimit.Config, newModel NewModel[S]) (*conf[S], error) {
	if err := check.Config("memory", cfg); err != nil {
		return nil, err
	}
	cfg = check.Value(cfg)
	m, grows, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	caps := m.Caps()
	if err := checkCaps(caps); err != nil {
		return nil, err
	}
	c := &conf[S]{model: m, newModel: newModel, caps: caps, timeless: caps&Timeless != 0, cfg: cfg,
		capacity: cfg.Capacity(), queue: cfg.QueueOptions(), infos: backend.MakeOutcomes(cfg.Capacity())}
	c.infos.SetGrows(&grantTag[S]{g: grows, c: c})
	return c, nil
}

// has reports whether the model has all of caps.
func (c *conf[S]) has(caps Caps) bool { return c.caps&caps == caps }

// pair is a limiter allocated with the current configuration of the
// limiters of one New or Factory, as New makes its first.
type pair[S any] struct {
	l   limiter[S]
	cur atomic.Pointer[conf[S]]
}

func (p *pair[S]) First() Limiter { return &p.l }

func (p *pair[S]) Next() Limiter {
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
	tail    *waiter     // newest waiter
	queued  int64       // permits queued
	stop    func() bool // the timer's
	timerAt int64       // instant the timer is set for; 0 when not set
	stale   bool        // reservations: tokens came back since the due instants after the head's were moved (see gaveBack)
	free    *handle[S]  // released handles, for reuse
	resets  uint64      // Resets of a limiter whose permits are held: a handle of an older one holds nothing
	// gen counts the changes of the queue and of what it waits for (a
	// waiter in or out, a refund, a release); behind caches behindQueue's
	// answer for the generation it was computed in.
	gen    uint64
	behind behind
	end    replayEnd[S] // the queue replayed, for replayQueue
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

// CheckPermits is checkPermits, for a Chain, which asks it first.
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
// except ch, which receives the answer exactly once. The queue is a
// doubly linked list of waiters (prev, next), as container/list's but
// without an element apart from the waiter: a cancelled Wait leaves it
// from anywhere in one step.
type waiter struct {
	permits    int64 // 0: a status check, answered once a permit is available
	due        int64 // reservations: when the reserved tokens have arrived
	at         int64 // when it joined the queue
	prev, next *waiter
	queued     bool
	ch         chan ratelimit.Lease
}
