package otel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/shadow"
	"github.com/limitkit/ratelimit/waittrace"
)

// Limiter is a ratelimit.Limiter whose decisions are recorded on a
// Recorder. It makes the decisions of the limiter it wraps and returns them
// unchanged, but for the leases of a concurrency limiter (WithConfig of a
// concurrency.Config), which it wraps to see their Release. It unwraps to
// the wrapped limiter, so the capabilities package control reaches
// (Reset, Reconfigure, Stats) and partitioned's idleness are its; its own
// Refund times the wrapped limiter's (see Refund). It is an io.Closer.
type Limiter struct {
	l     ratelimit.Limiter
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
	return &Limiter{l: l, r: r}
}

// ForKey wraps the limiters that newLimiter makes, for partitioned.Config's
// New: ForKey(f.ForKey) instruments every partition of a factory f. Record
// a partitioned limiter so or through WrapKeyed, not both on one Recorder:
// each decision would be counted twice.
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

// Wait is the wrapped limiter's Wait, recorded. The calls that queue (as
// the wrapped limiter tells the waittrace hooks of their ctx: every
// limiter of limitkit with a queue does) are counted by
// ratelimit.queued_requests while they wait, and their time in the queue
// recorded by ratelimit.request.time_in_queue; a call answered at once
// costs what an Acquire does, and one allocation (ctx with the hooks).
// The hooks already on ctx are told too.
func (w *Limiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	lease, err := w.l.Wait(w.r.withHooks(ctx), permits)
	w.r.record(lease, err, permits)
	return w.r.hold(lease, err, permits), err
}

// withHooks is ctx with r's waittrace hooks (a nil ctx, which the limiter
// refuses, as it is).
func (r *Recorder) withHooks(ctx context.Context) context.Context {
	if ctx == nil {
		return nil
	}
	return waittrace.WithHooks(ctx, r.hooks)
}

// queuedHook counts a Wait in the queue.
func (r *Recorder) queuedHook(context.Context, int) { r.queued.Add(1) }

// dequeuedHook records a Wait's time in the queue, with the Wait's ctx:
// the SDK takes exemplars (the trace of the request that waited) from it.
func (r *Recorder) dequeuedHook(ctx context.Context, _ int, d time.Duration, granted bool, err error) {
	r.timeInQueue.Record(ctx, d.Seconds(), r.waitOpts[result(granted, err)]...)
	r.queued.Add(-1)
}

// hold wraps a concurrency grant to see its Release.
func (r *Recorder) hold(lease ratelimit.Lease, err error, permits int) ratelimit.Lease {
	if !r.leases || err != nil || permits == 0 || !lease.Acquired() {
		return lease
	}
	h := &held{r: r, inner: lease, start: monotonic()}
	h.o = ratelimit.Outcome{Limit: lease.Limit(), Releaser: h, Grows: lease.Outcome().Grows}
	r.held.Add(1)
	return h.o.Lease(lease.Remaining(), 0, lease.ResetAfter(), 0)
}

// held is a concurrency lease being held.
type held struct {
	r     *Recorder
	o     ratelimit.Outcome
	inner ratelimit.Lease
	start time.Duration // monotonic()
	once  sync.Once
}

// Release runs once, at the lease's first Release.
func (h *held) Release(uint64) {
	h.once.Do(func() {
		h.inner.Release()
		h.r.held.Add(-1)
		h.r.leaseDuration.Record(context.Background(), (monotonic() - h.start).Seconds(), h.r.leaseOpts...)
	})
}

// Refund gives back a grant of the wrapped limiter, through its Refund when
// it can (control.Refund), else by releasing the lease (as Chain does with
// members that cannot). A concurrency lease is released (which is
// what a concurrency limiter's Refund does). Each Refund of a Redis
// limiter is timed in ratelimit.backend.duration, a concurrency lease's
// release included (a script call too).
func (w *Limiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	rf, ok := control.As[interface {
		Refund(context.Context, ratelimit.Lease, int) error
	}](w.l)
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

var _ io.Closer = (*Limiter)(nil)
