package otel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/shadow"
)

// Limiter is a ratelimit.Limiter whose decisions are recorded on a
// Recorder. It makes the decisions of the limiter it wraps and returns them
// unchanged, but for the leases of a concurrency limiter (WithConfig of a
// concurrency.Config), which it wraps to see their Release. It keeps the
// capabilities other packages rely on, passing them to the wrapped limiter:
// ratelimit.Idler (so partitioned can evict it), ratelimit.Refunder (so a
// Chain gives its grants back), io.Closer and Stats.
type Limiter struct {
	l     ratelimit.Limiter
	ow    ratelimit.ObservableWaiter // l, when it reports the Waits that queue
	r     *Recorder
	owned bool // Close closes r too (New made it)
}

// New returns l recording its decisions on a Recorder of its own, made
// with opts (see NewRecorder); the algorithm and the backend of a memory
// or redis limiter, a Chain, or one of those in shadow mode are found
// when not set. The Limiter owns l: its Close closes l, and unregisters the
// Recorder. For many limiters of one policy (the partitions of a
// partitioned limiter), make one Recorder and Wrap each.
func New(l ratelimit.Limiter, opts ...Option) (*Limiter, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: otel: nil limiter", ratelimit.ErrInvalidConfig)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.detect(l)
	r, err := newRecorder(&o)
	if err != nil {
		return nil, err
	}
	w := r.Wrap(l)
	w.owned = true
	return w, nil
}

// Wrap returns l recording its decisions on r. The Limiter owns l (its Close
// closes l), not r. Wrap of a nil l is nil.
func (r *Recorder) Wrap(l ratelimit.Limiter) *Limiter {
	if l == nil {
		return nil
	}
	ow, _ := l.(ratelimit.ObservableWaiter)
	return &Limiter{l: l, ow: ow, r: r}
}

// ForKey wraps the limiters that newLimiter makes, for partitioned.Config's
// New: ForKey(f.ForKey) instruments every partition of a factory f.
func (r *Recorder) ForKey(newLimiter func(key string) (ratelimit.Limiter, error)) func(key string) (ratelimit.Limiter, error) {
	return func(key string) (ratelimit.Limiter, error) {
		l, err := newLimiter(key)
		if err != nil || l == nil {
			return l, err
		}
		return r.Wrap(l), nil
	}
}

// Shadow returns l in shadow mode (shadow.New), with the decisions l makes
// recorded under ratelimit.mode "shadow" (New with WithShadow): every
// request is granted, and ratelimit.requests counts the refusals the limit
// would have made. onRefusal may be nil. The shadow limiter owns l.
func Shadow(l ratelimit.Limiter, onRefusal func(context.Context, shadow.Refusal), opts ...Option) (*shadow.Limiter, error) {
	in, err := New(l, append(opts[:len(opts):len(opts)], WithShadow())...)
	if err != nil {
		return nil, err
	}
	return shadow.New(in, onRefusal), nil
}

// Unwrap returns the wrapped limiter.
func (w *Limiter) Unwrap() ratelimit.Limiter { return w.l }

// Recorder returns the Recorder the decisions are recorded on.
func (w *Limiter) Recorder() *Recorder { return w.r }

// Acquire is the wrapped limiter's Acquire, recorded.
func (w *Limiter) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	r := w.r
	if !r.timed && !r.leases {
		lease, err := w.l.Acquire(ctx, permits)
		r.record(lease, err, permits)
		return lease, err
	}
	var start time.Duration
	if r.timed {
		start = monotonic()
	}
	lease, err := w.l.Acquire(ctx, permits)
	if r.timed {
		r.backendDuration.Record(nonNil(ctx), (monotonic() - start).Seconds(), r.backendOpts[resultIndex(lease, err)]...)
	}
	r.record(lease, err, permits)
	return r.hold(lease, err, permits), err
}

// Wait is the wrapped limiter's Wait, recorded. When the wrapped limiter is
// a ratelimit.ObservableWaiter (every limiter of limitkit with a queue), only
// the calls that queue are counted by ratelimit.queued_requests while they
// wait, and their time in the queue recorded by
// ratelimit.request.time_in_queue; a call answered at once costs what an
// Acquire does. Of another limiter, every call is counted and timed from
// call to answer.
func (w *Limiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return w.wait(ctx, permits, (*queueObserver)(w.r))
}

// WaitObserved is Wait, recorded, telling o too (ratelimit.ObservableWaiter),
// so that a limiter over this one (a partitioned limiter, a Chain) can tell
// its own observer of the Waits that queue.
func (w *Limiter) WaitObserved(ctx context.Context, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	if o == nil {
		return w.Wait(ctx, permits)
	}
	t := &teller{r: (*queueObserver)(w.r), o: o}
	lease, err := w.wait(ctx, permits, t)
	if t.queued {
		o.Dequeued(ctx, permits, t.d, lease, err) // with the lease Wait returns
	}
	return lease, err
}

// wait is the wrapped limiter's Wait, told to o, and recorded.
func (w *Limiter) wait(ctx context.Context, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	var lease ratelimit.Lease
	var err error
	if w.ow != nil {
		lease, err = w.ow.WaitObserved(ctx, permits, o)
	} else {
		lease, err = backend.WaitObserved(ctx, w.l, permits, o)
	}
	w.r.record(lease, err, permits)
	return w.r.hold(lease, err, permits), err
}

// teller is the observer of one WaitObserved: it records the Wait on r,
// and tells o it queued; WaitObserved tells o when it left, once the lease
// it returns is made.
type teller struct {
	r      *queueObserver
	o      ratelimit.QueueObserver
	queued bool
	d      time.Duration // the time queued
}

func (t *teller) Queued(ctx context.Context, permits int) {
	t.r.Queued(ctx, permits)
	t.queued = true
	t.o.Queued(ctx, permits)
}

func (t *teller) Dequeued(ctx context.Context, permits int, queued time.Duration, lease ratelimit.Lease, err error) {
	t.r.Dequeued(ctx, permits, queued, lease, err)
	t.d = queued
}

// queueObserver is a Recorder as the ratelimit.QueueObserver of Waits.
type queueObserver Recorder

func (o *queueObserver) Queued(context.Context, int) { o.queued.Add(1) }

// Dequeued records with the Wait's ctx: the SDK takes exemplars (the trace
// of the request that waited) from it.
func (o *queueObserver) Dequeued(ctx context.Context, _ int, d time.Duration, lease ratelimit.Lease, err error) {
	o.timeInQueue.Record(ctx, d.Seconds(), o.waitOpts[resultIndex(lease, err)]...)
	o.queued.Add(-1)
}

// hold wraps a concurrency grant to see its Release.
func (r *Recorder) hold(lease ratelimit.Lease, err error, permits int) ratelimit.Lease {
	if !r.leases || err != nil || permits == 0 || !lease.Acquired() {
		return lease
	}
	h := &held{r: r, inner: lease, start: monotonic()}
	r.held.Add(1)
	return ratelimit.NewLease(ratelimit.Decision{Granted: true, Remaining: lease.Remaining(), ResetAfter: lease.ResetAfter(), RetryAfter: -1},
		lease.Limit(), ratelimit.ReasonNone, h.release)
}

// held is a concurrency lease being held.
type held struct {
	r     *Recorder
	inner ratelimit.Lease
	start time.Duration // monotonic()
}

// release runs once, at the lease's first Release.
func (h *held) release() {
	h.inner.Release()
	h.r.held.Add(-1)
	h.r.leaseDuration.Record(context.Background(), (monotonic() - h.start).Seconds(), h.r.leaseOpts...)
}

// Refund gives back a grant of the wrapped limiter, through its Refund when
// it is a ratelimit.Refunder, else by releasing the lease (as Chain does
// with members that are not). A concurrency lease is released (which is
// what a concurrency limiter's Refund does). Each Refund of a Redis
// limiter is timed in ratelimit.backend.duration, a concurrency lease's
// release included (a script call too).
func (w *Limiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	rf, ok := w.l.(ratelimit.Refunder)
	if w.r.leases || !ok {
		if permits < 0 {
			return ratelimit.ErrInvalidPermits
		}
		if !ok || !w.r.timed {
			lease.Release()
			return nil
		}
		start := monotonic()
		lease.Release()
		w.r.backendDuration.Record(ctx, (monotonic() - start).Seconds(), w.r.backendOpts[0]...)
		return nil
	}
	if !w.r.timed {
		return rf.Refund(ctx, lease, permits)
	}
	start := monotonic()
	err := rf.Refund(ctx, lease, permits)
	res := 0
	if err != nil {
		res = 2
	}
	w.r.backendDuration.Record(ctx, (monotonic() - start).Seconds(), w.r.backendOpts[res]...)
	return err
}

// IdleFor is the wrapped limiter's IdleFor; a wrapped limiter that is not a
// ratelimit.Idler is never idle.
func (w *Limiter) IdleFor() (time.Duration, bool) {
	if il, ok := w.l.(ratelimit.Idler); ok {
		return il.IdleFor()
	}
	return 0, false
}

// Stats is the wrapped limiter's Stats; zero Stats when it has none.
func (w *Limiter) Stats() ratelimit.Stats {
	if st, ok := w.l.(interface{ Stats() ratelimit.Stats }); ok {
		return st.Stats()
	}
	return ratelimit.Stats{}
}

// Close closes the wrapped limiter when it is an io.Closer, and the Recorder
// when New made it.
func (w *Limiter) Close() error {
	var err error
	if c, ok := w.l.(io.Closer); ok {
		err = c.Close()
	}
	if w.owned {
		err = errors.Join(err, w.r.Close())
	}
	return err
}

// origin is the instant monotonic counts from.
var origin = time.Now()

// monotonic reads the monotonic clock only (time.Now reads the wall clock
// too): the time since origin.
func monotonic() time.Duration { return time.Since(origin) }

// nonNil is ctx, or context.Background for a nil ctx (which the wrapped
// limiter refuses), for the histograms' Record.
func nonNil(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

var (
	_ ratelimit.ObservableWaiter = (*Limiter)(nil)
	_ ratelimit.Idler            = (*Limiter)(nil)
	_ ratelimit.Refunder         = (*Limiter)(nil)
	_ io.Closer                  = (*Limiter)(nil)
)
