package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/waittrace"
	goredis "github.com/redis/go-redis/v9"
)

// Factory makes the limiter of one key of a policy: partitioned.Config's
// New. memory.Factory and redis.Factory are Factories.
type Factory interface {
	ForKey(key string) (ratelimit.Limiter, error)
}

// Backend makes the Factory of a policy's limiters. When the Factory is a
// control.Reconfigure, the Registry applies a change of the policy's
// configuration (same algorithm) to it, which must apply it to the limiters
// it made (memory's and redis's do), and to the partitioned limiter (or
// Memory's memory.Keyed); otherwise it replaces the limiters. When the Factory is an io.Closer, the
// Registry closes it once it no longer uses it: after closing the limiters
// it made, when the policy is deleted, its limiters are replaced or the
// Registry is closed (so that what the Factory holds for the policy, its
// metrics say, goes with it).
type Backend func(p Policy) (Factory, error)

// Memory is the backend of limiters in the process: each process counts
// on its own. The Registry keeps a policy's keys in a memory.Keyed (each
// key's state inline in its index; Options.IdleTimeout and MaxPartitions
// apply as memory.WithIdleTimeout and WithMaxKeys), which applies a change
// of configuration to every key at once; its Factory is a memory.Factory
// of the policy's config, for a limiter of one key made outside the
// Registry.
func Memory(opts ...memory.Option) Backend {
	return func(p Policy) (Factory, error) {
		f, err := memory.NewFactory(p.Config, opts...)
		if err != nil {
			return nil, err
		}
		return &memoryFactory{Factory: f, opts: opts}, nil
	}
}

// Redis is the backend of limiters in Redis (redis.NewFactory), shared by
// every process on the same Redis: a policy's keys are
// "limitkit:limit:" + name + ":" + its key kind (Policy.Key) + ":{" + key +
// "}" + the algorithm's suffix (a global policy's key is "global"), so that
// a change of key kind starts on keys of its own (a user named "global"
// never hands its count to a new global limit). They stay the same across a change of
// configuration, which Redis applies in place, carrying the state over
// (see redis.Limiter.Reconfigure), also of a window's length or a bucket's
// refill, or of a sliding window's form (weighted or segmented: both forms
// use the same keys); the algorithms have suffixes of their own, so a
// change between them starts on other keys, and the old ones expire. A policy deleted and created again finds
// the state its keys still hold, if its key kind is the same. opts are passed to redis.NewFactory; a
// redis.WithPrefix among them is overridden.
func Redis(client goredis.UniversalClient, opts ...redis.Option) Backend {
	return func(p Policy) (Factory, error) {
		o := append(opts[:len(opts):len(opts)], redis.WithPrefix("limitkit:limit:"+p.Name+":"+p.Key+":"))
		return redis.NewFactory(client, p.Config, o...)
	}
}

// Options configures NewRegistry. The zero value is the defaults.
type Options struct {
	// Backend makes the limiters; Memory() when nil.
	Backend Backend
	// IdleTimeout and MaxPartitions configure each policy's partitioned
	// limiter (see partitioned.Config), or memory.Keyed (Memory's); zero
	// means their defaults.
	IdleTimeout   time.Duration
	MaxPartitions int
	// OnError, if set, receives the errors of reloads that follow the
	// store's notifications: the store could not be read, a stored policy
	// does not decode (an *UndecodableError, at every reload until it is
	// replaced or deleted), or a policy's limiters could not be made (the
	// policy then keeps its previous limiters, or is absent).
	OnError func(error)
}

// Registry makes the decisions of a store's policies: (policy, key,
// calling application) → a limiter's lease. It keeps one
// partitioned.Limiter per policy, a partition per key (one partition,
// "global", for a Global policy), made by the Backend (a memory.Keyed for
// Memory's), and follows the store (Store.Watch):
//
//   - a change of configuration of the same algorithm and key is applied in
//     place (control.Reconfigure): the live limiters keep their state by
//     the algorithm's rule (a token bucket keeps its tokens, clamped to the
//     new burst; windows keep their counts, held against the new limit,
//     also across a sliding window's switch between its weighted and
//     segmented forms; concurrency holders keep their permits), so during
//     a change no key admits more than the larger of the two limits would;
//   - a change of algorithm or key kind, or one the limiters refuse to
//     make in place, replaces the limiters: the new ones start in their
//     initial state (on Redis too: see Redis for the keys), and calls
//     waiting on the old ones are served by the new;
//   - a change of Apps or audit fields alone changes only who is allowed;
//   - a deletion closes the policy's limiters.
//
// A lookup reads an immutable map through an atomic pointer: no lock.
// The Registry is safe for concurrent use; Close stops its watcher.
type Registry struct {
	store   Store
	opts    Options
	entries atomic.Pointer[map[string]*entry]
	closed  atomic.Bool

	mu   sync.Mutex // serializes reloads: List and apply
	stop func()
}

type entry struct {
	policy  atomic.Pointer[Policy]
	lim     limits
	factory Factory
	global  bool
}

// NewRegistry reads store's policies, makes their limiters and follows
// the store's changes until Close. An error reading the store is returned;
// a policy whose limiters cannot be made is reported to Options.OnError and
// left out.
func NewRegistry(ctx context.Context, store Store, opts Options) (*Registry, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidPolicy)
	}
	if opts.Backend == nil {
		opts.Backend = Memory()
	}
	r := &Registry{store: store, opts: opts}
	empty := map[string]*entry{}
	r.entries.Store(&empty)
	// Watch first, so that no change made after the first read is missed.
	r.stop = store.Watch(r.changed)
	if err := r.Reload(ctx); err != nil {
		var list *listError
		if errors.As(err, &list) {
			r.Close()
			return nil, list.err
		}
		r.report(err)
	}
	return r, nil
}

type listError struct{ err error }

func (e *listError) Error() string { return e.err.Error() }
func (e *listError) Unwrap() error { return e.err }

func (r *Registry) report(err error) {
	if err != nil && r.opts.OnError != nil {
		r.opts.OnError(err)
	}
}

func (r *Registry) changed() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Reload(ctx); !errors.Is(err, ratelimit.ErrClosed) {
		r.report(err)
	}
}

// Store is the registry's store.
func (r *Registry) Store() Store { return r.store }

// Reload reads the store now and applies what changed (the watcher does it
// on every notification; the admin API after each write, so that a write
// is seen at once by the process that made it). Reloads are serialized, so
// a later read is never applied before an earlier one. A policy the store
// cannot decode (an *UndecodableError) keeps what the registry applied of
// it before, the others are applied, and the error is returned.
func (r *Registry) Reload(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return ratelimit.ErrClosed
	}
	ps, err := r.store.List(ctx)
	var bad *UndecodableError
	if err != nil && (!errors.As(err, &bad) || ps == nil) {
		return &listError{fmt.Errorf("policy: reading the store: %w", err)}
	}
	var keep []string
	if bad != nil {
		keep = bad.Names
	}
	return errors.Join(err, r.apply(ps, keep))
}

// apply makes the registry hold ps, and keeps the entries of the names in
// keep as they are; it requires r.mu.
func (r *Registry) apply(ps []Policy, keep []string) error {
	old := *r.entries.Load()
	next := make(map[string]*entry, len(ps)+len(keep))
	for _, name := range keep {
		if e := old[name]; e != nil {
			next[name] = e
		}
	}
	var errs []error
	var retired []*entry
	changed := len(old) != len(next)+len(ps)
	for _, p := range ps {
		e := old[p.Name]
		if e != nil {
			if r.update(e, p) {
				next[p.Name] = e
				continue
			}
		}
		changed = true
		ne, err := r.newEntry(p)
		if err != nil {
			errs = append(errs, err)
			if e != nil {
				next[p.Name] = e // keep serving the previous version
			}
			continue
		}
		next[p.Name] = ne
		if e != nil {
			retired = append(retired, e)
		}
	}
	for name, e := range old {
		if _, ok := next[name]; !ok {
			retired = append(retired, e)
		}
	}
	if changed {
		r.entries.Store(&next)
	}
	for _, e := range retired {
		if err := e.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close closes e's limiters, then its factory if it is an io.Closer.
func (e *entry) close() error {
	return errors.Join(e.lim.Close(), closeFactory(e.factory))
}

func closeFactory(f Factory) error {
	if c, ok := f.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// update applies p to e in place when it can, and reports whether it did.
func (r *Registry) update(e *entry, p Policy) bool {
	cur := e.policy.Load()
	if reflect.DeepEqual(*cur, p) {
		return true
	}
	if cur.Algorithm() != p.Algorithm() || cur.Key != p.Key {
		return false
	}
	if !reflect.DeepEqual(cur.Config, p.Config) {
		fr, ok := e.factory.(interface{ Reconfigure(ratelimit.Config) error })
		if !ok {
			return false
		}
		// The factory first, so that partitions made from now on have the
		// new config (memory's Factory applies it to the limiters it made
		// too); then the live partitions, and those made meanwhile.
		if fr.Reconfigure(p.Config) != nil {
			return false
		}
		if err := e.lim.Reconfigure(p.Config); err != nil {
			r.report(fmt.Errorf("policy: reconfiguring %q: %w", p.Name, err))
			return false
		}
	}
	p = clonePolicy(p)
	e.policy.Store(&p)
	return true
}

func (r *Registry) newEntry(p Policy) (*entry, error) {
	f, err := r.opts.Backend(p)
	if err != nil {
		return nil, fmt.Errorf("policy: making the limiters of %q: %w", p.Name, err)
	}
	lim, err := r.newLimits(p, f)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("policy: making the limiters of %q: %w", p.Name, err), closeFactory(f))
	}
	e := &entry{lim: lim, factory: f, global: p.Key == Global}
	p = clonePolicy(p)
	e.policy.Store(&p)
	return e, nil
}

// Policy returns the policy name as the registry applies it now.
func (r *Registry) Policy(name string) (Policy, bool) {
	e := (*r.entries.Load())[name]
	if e == nil {
		return Policy{}, false
	}
	return clonePolicy(*e.policy.Load()), true
}

// Policies returns the policies the registry applies now, sorted by name.
func (r *Registry) Policies() []Policy {
	m := *r.entries.Load()
	out := make([]Policy, 0, len(m))
	for _, e := range m {
		out = append(out, clonePolicy(*e.policy.Load()))
	}
	sortPolicies(out)
	return out
}

const globalKey = "global"

// lookup finds the entry of name and the partition key of key; app is
// checked unless checkApp is false (the admin's calls).
func (r *Registry) lookup(name, key, app string, checkApp bool) (*entry, string, error) {
	if r.closed.Load() {
		return nil, "", ratelimit.ErrClosed
	}
	e := (*r.entries.Load())[name]
	if e == nil {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
	}
	if checkApp && !e.policy.Load().Allows(app) {
		return nil, "", fmt.Errorf("%w: application %q may not use policy %q", ErrForbidden, app, name)
	}
	if e.global {
		return e, globalKey, nil
	}
	if key == "" || len(key) > MaxKeyLen {
		return nil, "", fmt.Errorf("%w: policy %q is counted per %s: the key must be 1 to %d bytes, got %d", ErrInvalidKey, name, e.policy.Load().Key, MaxKeyLen, len(key))
	}
	return e, key, nil
}

// retired reports whether e is no longer name's entry (replaced or
// deleted while a call used it).
func (r *Registry) retired(name string, e *entry) bool {
	return !r.closed.Load() && (*r.entries.Load())[name] != e
}

// Acquire takes permits for key under policy name, on behalf of the
// application app, now or refuses (see ratelimit.Limiter). Errors:
// ErrUnknownPolicy, ErrForbidden (app is not in the policy's Apps),
// ErrInvalidKey, ratelimit.ErrClosed after Close, and the limiter's own.
// permits == 0 is a status check that takes nothing (see Peek).
func (r *Registry) Acquire(ctx context.Context, name, key, app string, permits int) (ratelimit.Lease, error) {
	return r.take(ctx, name, key, app, permits, false)
}

// Wait takes permits for key under policy name, on behalf of app, waiting
// until ctx is done; errors as Acquire. A waiter whose policy's limiters are
// replaced waits on the new ones.
//
// The time a call spends queued is told to ctx's waittrace hooks, as one
// Wait even when it moves to the policy's new limiters.
func (r *Registry) Wait(ctx context.Context, name, key, app string, permits int) (ratelimit.Lease, error) {
	ctx, span := waittrace.Begin(ctx, permits)
	lease, err := r.take(ctx, name, key, app, permits, true)
	if span != nil { // no hooks: no clock to read
		span.Done(time.Now(), lease.Acquired(), err)
	}
	return lease, err
}

// take asks policy name's limiter for permits for key, on behalf of app:
// waiting if wait is set, now (Acquire) otherwise. A call whose policy's
// limiters are replaced under it asks the new ones.
func (r *Registry) take(ctx context.Context, name, key, app string, permits int, wait bool) (ratelimit.Lease, error) {
	for {
		e, k, err := r.lookup(name, key, app, true)
		if err != nil {
			return ratelimit.Lease{}, err
		}
		var lease ratelimit.Lease
		if wait {
			lease, err = e.lim.Wait(ctx, k, permits)
		} else {
			lease, err = e.lim.Acquire(ctx, k, permits)
		}
		if (errors.Is(err, ratelimit.ErrClosed) || lease.Reason() == ratelimit.ReasonClosed) && r.retired(name, e) {
			continue // the policy changed under the call: ask its new limiter
		}
		return lease, err
	}
}

// Peek returns key's figures under policy name without taking anything
// (Acquire of 0 permits, whatever the application): Remaining, Limit,
// ResetAfter, and a RetryAfter when no permit is available.
func (r *Registry) Peek(ctx context.Context, name, key string) (ratelimit.Lease, error) {
	e, k, err := r.lookup(name, key, "", false)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	return e.lim.Acquire(ctx, k, 0)
}

// Reset puts key's limiter of policy name back in its initial state (see
// control.Reset and partitioned's Reset): on Redis, for every process
// (one that remembers a refusal of the key sees the reset within a second;
// see redis.WithoutRefusalCache).
// A backend whose limiters cannot reset returns an error wrapping
// errors.ErrUnsupported.
func (r *Registry) Reset(ctx context.Context, name, key string) error {
	e, k, err := r.lookup(name, key, "", false)
	if err != nil {
		return err
	}
	return e.lim.Reset(ctx, k)
}

// Close stops following the store and closes every policy's limiters
// (their waiters are refused) and the factories that are io.Closers; later
// calls return ratelimit.ErrClosed. Safe to call twice.
func (r *Registry) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.entries.Load()
	empty := map[string]*entry{}
	r.entries.Store(&empty)
	var errs []error
	for _, e := range old {
		errs = append(errs, e.close())
	}
	return errors.Join(errs...)
}

// keyed is one policy of a registry as used by one application.
type keyed struct {
	r         *Registry
	name, app string
}

// Keyed returns policy name as used by app: a ratelimit.Keyed, so
// httplimit.Middleware(reg.Keyed("api", "web"), ...) limits requests by a
// policy that changes at run time. The policy is looked up at each call:
// it may be created, changed or deleted meanwhile. It reports the
// configuration the policy decides by now (httplimit.Configured: the
// middleware's RateLimit fields follow the policy's live changes), and
// its For(key) is key's limiter under the policy, which refunds a grant
// (control.Refund: a route's grant that the global limit refused is not
// spent; a grant of a limiter since replaced gives nothing back), settles
// a reservation (control.Settle) and resets.
func (r *Registry) Keyed(name, app string) ratelimit.Keyed { return keyed{r, name, app} }

// Acquire is the registry's Acquire for k's policy and application.
func (k keyed) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	return k.r.Acquire(ctx, k.name, key, k.app, permits)
}

// Wait is the registry's Wait for k's policy and application.
func (k keyed) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	return k.r.Wait(ctx, k.name, key, k.app, permits)
}

// Config is the configuration k's policy decides by now (nil when the
// registry has no such policy).
func (k keyed) Config() ratelimit.Config {
	e := (*k.r.entries.Load())[k.name]
	if e == nil {
		return nil
	}
	return e.policy.Load().Config
}

// For is key's limiter under k's policy.
func (k keyed) For(key string) ratelimit.Limiter { return keyLimiter{k, key} }

// keyLimiter is one key of a keyed.
type keyLimiter struct {
	k   keyed
	key string
}

func (l keyLimiter) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return l.k.Acquire(ctx, l.key, permits)
}

func (l keyLimiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return l.k.Wait(ctx, l.key, permits)
}

// Refund gives lease, a grant of the key under the policy, back to that
// policy's limiter (see partitioned.Limiter.Refund).
func (l keyLimiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	e, pk, err := l.k.r.lookup(l.k.name, l.key, l.k.app, true)
	if err != nil {
		return err
	}
	return e.lim.Refund(ctx, pk, lease, permits)
}

// Reset is the registry's Reset of the key under the policy.
func (l keyLimiter) Reset(ctx context.Context) error { return l.k.r.Reset(ctx, l.k.name, l.key) }
