package hotkey

import (
	"context"
	"fmt"
	"math"
	"math/rand"
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
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/waittrace"
)

// Limiter is a ratelimit.Limiter on one Redis key whose process spends
// leases of pre-paid permits locally (see the package doc). It is safe for
// concurrent use; Close it to give its lease back.
type Limiter struct {
	client     goredis.UniversalClient
	script     *goredis.Script
	keys       []string
	params     []interface{} // the algorithm's, after the script's common arguments
	capacity   int64
	maxHeld    int64 // the permits all live leases may hold together
	expiry     time.Duration
	expiryUS   int64
	target     time.Duration // how long a lease lasts at the recent demand
	minValidUS int64         // the least validity worth holding permits for
	infos      backend.Outcomes
	queue      ratelimit.Queue
	unlimited  bool
	o          options

	cur    atomic.Pointer[batch] // the lease being spent; nil for none
	asked  atomic.Int64          // permits asked for since creation: the demand
	used   atomic.Int64          // UnixNano of the last call, for IdleFor
	calls  atomic.Int64          // script calls made
	seq    atomic.Uint64         // of lease ids
	idBase string                // this limiter's part of its lease ids
	closed atomic.Bool
	done   chan struct{} // closed by Close: wakes sleeping waiters

	// gives counts the give-backs a refill or a check has begun (added
	// under mu), which Close waits for.
	gives sync.WaitGroup

	mu      sync.Mutex
	flight  *refill  // the refill in flight, nil for none
	refused *refusal // the last refusal, remembered
	rate    float64  // recent demand, permits per second
	lastAt  time.Time
	asked0  int64 // asked at lastAt

	// lag, in tests on a fake clock, moves the clock as a call leaves and
	// as its answer arrives: the time a call takes on the way.
	lag func()
}

// New returns the limiter of key for cfg, a tokenbucket, fixedwindow or
// slidinglog Config (or a pointer to one): the algorithms that leases
// serve here without ever admitting more than the exact limiter (the
// package doc says why, and what of the others). Its state lives under keys of
// its own (prefix + "{" + key + "}" + ":tbl", ":fwl" or ":sll", and more
// after those), apart from an exact limiter's on the same key: every
// process that shares a limit must use this package for it. Bad input
// (nil client, invalid cfg, another algorithm, an invalid key or option)
// is an error wrapping ratelimit.ErrInvalidConfig or redis.ErrInvalidKey
// that names the value.
func New(client goredis.UniversalClient, key string, cfg ratelimit.Config, opts ...Option) (*Limiter, error) {
	o := options{prefix: "ratelimit:", expiry: DefaultExpiry, share: DefaultShare, timeout: redis.DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if client == nil {
		return nil, fmt.Errorf("%w: hotkey: nil client", ratelimit.ErrInvalidConfig)
	}
	if key == "" || len(key) > redis.MaxKeyLen || key[0] == '}' {
		return nil, fmt.Errorf("%w: hotkey: key %.40q: want 1 to %d bytes, not starting with }", redis.ErrInvalidKey, key, redis.MaxKeyLen)
	}
	if strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("%w: hotkey: prefix %q holds a brace", ratelimit.ErrInvalidConfig, o.prefix)
	}
	if o.expiry < time.Millisecond || o.expiry > time.Minute || o.expiry%time.Microsecond != 0 {
		return nil, fmt.Errorf("%w: hotkey: expiry %v: want 1ms to 1m, in whole microseconds", ratelimit.ErrInvalidConfig, o.expiry)
	}
	if !(o.share > 0 && o.share <= 1) {
		return nil, fmt.Errorf("%w: hotkey: share %v: want a fraction in (0, 1]", ratelimit.ErrInvalidConfig, o.share)
	}
	if err := check.Config("hotkey", cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = check.Value(cfg)
	d, err := algo.Of("hotkey", cfg)
	if err != nil {
		return nil, err
	}
	enc, err := d.Redis(algo.RedisOptions{}) // checks whole microseconds
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, capacity: cfg.Capacity(), expiry: o.expiry, expiryUS: int64(o.expiry / time.Microsecond),
		queue: cfg.QueueOptions(), o: o, done: make(chan struct{}), idBase: strconv.FormatUint(rand.Uint64(), 36)}
	l.minValidUS = l.expiryUS / 10
	base := o.prefix + "{" + key + "}"
	m, ok := modes[d.Name()]
	if !ok {
		return nil, fmt.Errorf("%w: hotkey: %T: leases serve a token bucket, a fixed window or a sliding log only (see the package doc)", ratelimit.ErrInvalidConfig, cfg)
	}
	l.script, l.unlimited = scripts[m.script], enc.Unlimited
	for _, suffix := range m.suffixes {
		l.keys = append(l.keys, base+suffix)
	}
	l.target = o.expiry / m.share
	l.params = enc.Args
	if m.params > 0 {
		l.params = enc.Args[:m.params]
	}
	limit := cfg.Capacity()
	l.maxHeld = int64(math.Floor(o.share * float64(limit)))
	l.infos = backend.MakeOutcomes(l.capacity)
	l.infos.SetGrows(d.Grows())
	l.used.Store(l.now().UnixNano())
	return l, nil
}

// leaseMode is how leases serve an algorithm, by its name: its script
// here, its keys' suffixes, how many of its Redis parameters (the exact
// script's) the script reads (0: all), and the part of an expiry of
// demand a lease holds (target = expiry / share).
type leaseMode struct {
	script   string
	suffixes []string
	params   int
	share    time.Duration
}

var modes = map[string]leaseMode{
	"tokenbucket": {"tokenbucket", []string{":tbl", ":tbl:l"}, 4, 2}, // rate, burst, period, per period
	"fixedwindow": {"fixedwindow", []string{":fwl", ":fwl:l"}, 0, 2},
	// A sliding log's leased permits are logged from their debit to their
	// return: short leases are logged soon after their spends.
	"slidinglog": {"slidinglog", []string{":sll", ":sll:l", ":sll:g"}, 0, 8},
}

// now is the limiter's local time.
func (l *Limiter) now() time.Time {
	if l.o.clock != nil {
		return l.o.clock.Now()
	}
	return time.Now()
}

// dead marks a batch that is no longer spent: below any request.
const dead = math.MinInt64 / 2

// A batch is a lease this process holds: h permits to spend before its
// deadline.
type batch struct {
	id        string
	h, e      int64        // its permits, and its expiry on the script's clock (us)
	left      atomic.Int64 // permits not spent; dead once given back or replaced
	deadline  time.Time    // local: the call's send instant + its validity, less the margin
	shared    int64        // what Redis had left after the take
	resetAt   time.Time    // local: when Redis's state would be initial again
	stopTimer func() bool  // its timer's
}

// take spends p permits of b, and reports what is left.
func (b *batch) take(p int64) (int64, bool) {
	for {
		v := b.left.Load()
		if v < p {
			return v, false
		}
		if b.left.CompareAndSwap(v, v-p) {
			return v - p, true
		}
	}
}

// stop ends b's spending and returns its permits never spent.
func (b *batch) stop() int64 { return max(b.left.Swap(dead), 0) }

// Acquire takes permits now or refuses, as ratelimit.Limiter says: from
// the process's lease at memory speed when it holds enough unexpired
// permits, otherwise in one script call that decides the request as the
// exact limiter would and takes a new lease (giving the old one's unspent
// permits back). After a refusal from Redis, the process refuses locally
// until its RetryAfter, or one lease expiry, has passed.
//
// A grant's Remaining is the process's view: the permits left in its
// lease plus what Redis had left at its last call (other processes may
// have taken some since); its ResetAfter is Redis's at that call. A
// refusal's RetryAfter is a hint: when Redis's state would serve a new
// lease if nothing else happened.
//
// When Redis cannot answer a refill, the failure policy answers (see
// WithFailurePolicy); the permits of a live lease are still spent.
func (l *Limiter) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, l.capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	if l.closed.Load() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	if l.unlimited {
		return (&l.infos).Lease(backend.Decision{Granted: true, Remaining: -1}, ratelimit.ReasonNone, 0), nil
	}
	p := int64(permits)
	l.asked.Add(max(p, 1))
	for {
		b := l.cur.Load()
		if b != nil {
			if p == 0 {
				if v := b.left.Load(); v >= 1 {
					if now := l.now(); now.Before(b.deadline) {
						return l.grant(b, v, now), nil
					}
				}
			} else if v, ok := b.take(p); ok {
				// The clock is read after the permits are taken: a grant
				// is made before the deadline, never after.
				if now := l.now(); now.Before(b.deadline) {
					return l.grant(b, v, now), nil
				}
				// Past the deadline: these permits go with the lease.
			}
		}
		lease, err, again := l.slow(ctx, p, b)
		if !again {
			return lease, err
		}
	}
}

// grant is a grant from b that left v permits in it, at the local now.
func (l *Limiter) grant(b *batch, v int64, now time.Time) ratelimit.Lease {
	d := backend.Decision{Granted: true, Remaining: v + b.shared, ResetAfter: max(b.resetAt.Sub(now), 0)}
	return (&l.infos).Lease(d, ratelimit.ReasonNone, 0)
}

// Wait takes permits, waiting until ctx is done: it acquires, and after a
// refusal sleeps until its RetryAfter (plus a little jitter, so that
// processes do not retry together) and acquires again. A request of more
// permits than the Queue's Limit (when set) is refused at once with
// ReasonQueueFull, and one whose RetryAfter falls past ctx's deadline with
// ReasonDeadline; a Close wakes it with ReasonClosed. There is no queue
// across processes: a token bucket does not reserve, as the exact limiter
// does.
//
// The time it spends asleep is told to ctx's waittrace hooks.
func (l *Limiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if err := base.CheckPermits(permits, l.capacity); err != nil {
		return ratelimit.Lease{}, err
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	ctx, span := waittrace.Begin(ctx, permits)
	lease, err := l.wait(ctx, permits, span)
	if span != nil { // no hooks: no clock to read
		span.Done(l.now(), lease.Acquired(), err)
	}
	return lease, err
}

func (l *Limiter) wait(ctx context.Context, permits int, span *waittrace.Span) (ratelimit.Lease, error) {
	backoff := time.Millisecond
	for {
		lease, err := l.Acquire(ctx, permits)
		if err != nil || lease.Acquired() || lease.Reason() == ratelimit.ReasonUnavailable {
			return lease, err
		}
		if int64(permits) > check.QueueLimit(l.queue) {
			return l.refusedAs(lease, ratelimit.ReasonQueueFull), nil
		}
		d, known := lease.RetryAfter()
		d, ok := base.PollDelay(ctx, d, known, &backoff, func(deadline time.Time) time.Duration { return deadline.Sub(l.now()) })
		if !ok {
			return l.refusedAs(lease, ratelimit.ReasonDeadline), nil
		}
		if err := l.sleep(ctx, d, span); err != nil {
			return ratelimit.Lease{}, err
		}
		if l.closed.Load() {
			return (&l.infos).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonClosed, 0), nil
		}
	}
}

// refusedAs is lease, a refusal, refused for r instead (a fallback's
// refusal keeps its own Limit).
func (l *Limiter) refusedAs(lease ratelimit.Lease, r ratelimit.Reason) ratelimit.Lease {
	d := backend.Decision{Remaining: lease.Remaining(), ResetAfter: lease.ResetAfter(), RetryAfter: -1}
	if ra, ok := lease.RetryAfter(); ok {
		d.RetryAfter = ra
	}
	if lease.Outcome() != &l.infos[lease.Reason()] {
		return backend.Refusal(d, lease.Limit(), r)
	}
	return (&l.infos).Lease(d, r, 0)
}

// sleep waits d on the limiter's clock, until ctx ends or Close; span is
// told once the timer is armed.
func (l *Limiter) sleep(ctx context.Context, d time.Duration, span *waittrace.Span) error {
	done := make(chan struct{})
	var stop func() bool
	if l.o.clock != nil {
		stop = l.o.clock.AfterFunc(d, func() { close(done) })
	} else {
		stop = time.AfterFunc(d, func() { close(done) }).Stop
	}
	defer stop()
	span.Join(l.now())
	select {
	case <-done:
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// CheckPermits reports the error Acquire and Wait return for permits
// whatever the state (a Chain asks it first).
func (l *Limiter) CheckPermits(permits int) error { return base.CheckPermits(permits, l.capacity) }

// IdleFor reports the limiter idle, for as long as it has not been
// called, when it holds no lease and no call is in flight: dropping it
// then strands nothing (partitioned.Idler).
func (l *Limiter) IdleFor() (time.Duration, bool) {
	l.mu.Lock()
	busy := l.flight != nil
	l.mu.Unlock()
	if b := l.cur.Load(); busy || (b != nil && b.left.Load() > 0) {
		return 0, false
	}
	return max(0, time.Duration(l.now().UnixNano()-l.used.Load())), true
}

// Close gives the unspent permits of the process's lease back to Redis
// (one call, bounded by the timeout; a refill in flight is waited for
// first, and its lease given back too), wakes sleeping waiters with a
// ReasonClosed refusal, and makes later calls return ratelimit.ErrClosed.
// A process that shuts down closes its limiters, so that the next
// processes get their permits at once rather than at the leases' expiry.
// It is safe to call twice; the client is not closed.
func (l *Limiter) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.done)
	l.mu.Lock()
	f := l.flight
	l.mu.Unlock()
	if f != nil {
		<-f.done // bounded by the timeout
	}
	l.mu.Lock()
	b := l.cur.Swap(nil)
	if b != nil && b.stopTimer != nil {
		b.stopTimer()
	}
	l.mu.Unlock()
	var err error
	if b != nil {
		err = l.giveBack(b)
	}
	l.gives.Wait() // those a refill or a check began: bounded by the timeout
	return err
}

// Calls is the number of script calls the limiter has made, for
// measuring calls per decision.
func (l *Limiter) Calls() int64 { return l.calls.Load() }
