// Package shadow runs a limit without enforcing it: a shadow Limiter asks the
// limiter it wraps, as usual, reports each refusal that limiter made, and
// grants anyway. A new or lowered limit can so run on production traffic,
// and show what it would refuse, before it refuses anyone.
//
// The wrapped limiter keeps its state as if its refusals had been enforced:
// a refusal takes nothing, so its later decisions are those it would make if
// the refused callers had been turned away. It never holds more than it
// granted itself: a request it refused is granted by the shadow limiter
// with a lease that holds nothing (a refused concurrency request takes no
// permit, and its Release gives none back).
//
// Every lease of a shadow limiter says that no limit is enforced: Limit and
// Remaining are -1, as partitioned.NoLimit's are. So the HTTP middleware
// announces no policy that it does not enforce (no RateLimit headers), and
// clients that slow down when a limit runs out (httplimit.Transport) do not
// slow down for it. A grant of the wrapped limiter is still its grant:
// Release gives its permits back, and Refund takes it back.
//
// Record the refusals with the callback given to New, or with the otel
// module (github.com/limitkit/ratelimit/otel), which counts the decisions
// of the wrapped limiter under ratelimit.mode "shadow". To run a policy of
// the HTTP middleware in shadow mode, give httplimit a limiter wrapped here:
// httplimit.Global(shadow.New(l, f)), or a httplimit.KeyedFunc that returns
// shadow.New(perKey.For(key), f), or a partitioned limiter whose Config.New
// wraps each partition's limiter.
package shadow

import (
	"context"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/leases"
)

// Refusal is what the wrapped limiter answered to a request that the shadow
// limiter granted all the same.
type Refusal struct {
	// Permits is the number of permits asked for.
	Permits int
	// Wait reports a call of Wait (which asked the wrapped limiter's
	// Acquire: see Limiter.Wait).
	Wait bool
	// Lease is the wrapped limiter's refusal (its Reason, its RetryAfter);
	// the zero Lease when it returned an error.
	Lease ratelimit.Lease
	// Err is the wrapped limiter's error when it could not decide
	// (ratelimit.ErrExceedsLimit, a backend failure, ...); nil for a refusal.
	Err error
}

// Limiter is a limiter in shadow mode: its calls are granted unless invalid,
// whatever the limiter it wraps decides. Besides ratelimit.Limiter it keeps
// the capabilities other packages rely on, passing them to the wrapped
// limiter: ratelimit.Idler (so partitioned can evict it), ratelimit.Refunder
// (so a Chain that a later member refuses gives its grant back), io.Closer
// and Stats. It is safe for concurrent use.
type Limiter struct {
	l         ratelimit.Limiter
	onRefusal func(context.Context, Refusal)
	// free is the Info of the leases granted for the wrapped limiter's
	// refusals: no limit, nothing to release.
	free leases.Info
	// known is the Info of the wrapped limiter's grants that hold nothing
	// to release, once one has been seen (the first one's: a memory or
	// redis rate limiter makes all its grants with one). Such a grant is
	// returned as a lease of hidden carrying the grant's token, which
	// allocates nothing, and Refund makes the wrapped limiter's lease again
	// from known and the token. Other grants (concurrency, Chain) are each
	// wrapped in a grant record.
	hidden leases.Info
	known  atomic.Pointer[leases.Info]
	closed atomic.Bool
}

// grant is a grant of the wrapped limiter that Refund cannot make again
// from its token: its lease is kept.
type grant struct {
	info     leases.Info // GrantInfo(-1, the grant)
	s        *Limiter
	inner    ratelimit.Lease
	refunded atomic.Bool
}

// Release releases the wrapped limiter's lease (which is idempotent).
func (g *grant) Release(uint64) { g.inner.Release() }

// New returns l in shadow mode. onRefusal, when not nil, is called for
// every request l refused or could not decide (and that the shadow limiter
// granted), on the caller's goroutine, before the call returns; it must be
// safe for concurrent use. The shadow limiter owns l: its Close closes l.
// New of a nil l is nil.
func New(l ratelimit.Limiter, onRefusal func(ctx context.Context, r Refusal)) *Limiter {
	if l == nil {
		return nil
	}
	return &Limiter{l: l, onRefusal: onRefusal, free: leases.GrantInfo(-1, nil), hidden: leases.GrantInfo(-1, nil)}
}

// Unwrap returns the wrapped limiter.
func (s *Limiter) Unwrap() ratelimit.Limiter { return s.l }

// Acquire asks the wrapped limiter's Acquire and returns its lease when it
// grants. When it refuses, or returns an error other than ctx's, Acquire
// reports the Refusal and grants with a lease that holds nothing, whose
// Limit and Remaining are -1 (no limit enforced). A negative permits
// (ratelimit.ErrInvalidPermits), a nil ctx (ratelimit.ErrNilContext),
// a done one (ctx.Err()) and a closed shadow limiter (ratelimit.ErrClosed)
// are errors, as for any limiter, and so is ctx ending during the call.
func (s *Limiter) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return s.acquire(ctx, permits, false)
}

// Wait is Acquire, reported as a Wait: a shadow limiter never makes a
// caller wait, so it asks the wrapped limiter's Acquire, and a refusal is
// what Wait would have waited for (the refusal's RetryAfter says how long,
// when known). The wrapped limiter's queue stays empty.
func (s *Limiter) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return s.acquire(ctx, permits, true)
}

// WaitObserved is Wait (ratelimit.ObservableWaiter): a shadow limiter's
// Wait never queues, so o is told nothing.
func (s *Limiter) WaitObserved(ctx context.Context, permits int, _ ratelimit.QueueObserver) (ratelimit.Lease, error) {
	return s.Wait(ctx, permits)
}

func (s *Limiter) acquire(ctx context.Context, permits int, wait bool) (ratelimit.Lease, error) {
	if permits < 0 {
		return ratelimit.Lease{}, base.CheckPermits(permits, math.MaxInt64)
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	if s.closed.Load() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	lease, err := s.l.Acquire(ctx, permits)
	if err == nil && lease.Acquired() {
		return s.hide(lease), nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return ratelimit.Lease{}, cerr
	}
	if s.onRefusal != nil {
		s.onRefusal(ctx, Refusal{Permits: permits, Wait: wait, Lease: lease, Err: err})
	}
	return ratelimit.Lease(s.free.Grant(-1, 0, 0)), nil
}

// hide returns the shadow limiter's lease for a grant of the wrapped
// limiter: no limit, and the grant within.
func (s *Limiter) hide(lease ratelimit.Lease) ratelimit.Lease {
	il := leases.Lease(lease)
	if il.Releaser() == nil {
		info := il.Info()
		known := s.known.Load()
		if known == nil && s.known.CompareAndSwap(nil, info) {
			known = info
		}
		if token, ok := il.Token(known); ok {
			return ratelimit.Lease(s.hidden.Grant(-1, 0, token))
		}
	}
	g := &grant{s: s, inner: lease}
	g.info = leases.GrantInfo(-1, g)
	return ratelimit.Lease(g.info.Grant(-1, 0, 0))
}

// Refund gives back to the wrapped limiter a grant it made, once: through
// its Refund when it is a ratelimit.Refunder, else by releasing the lease
// (as Chain does with members that are not). A lease granted for a refusal
// holds nothing, and refunding it does nothing, as does refunding a lease
// of another limiter.
func (s *Limiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if permits < 0 {
		return base.CheckPermits(permits, math.MaxInt64)
	}
	var inner ratelimit.Lease
	il := leases.Lease(lease)
	if token, ok := il.Token(&s.hidden); ok {
		// A rate grant: it holds nothing, and the wrapped limiter takes
		// a second refund of it as the first (the Refunder's contract).
		inner = ratelimit.Lease(s.known.Load().Grant(0, 0, token))
	} else if g, ok := il.Releaser().(*grant); ok && g.s == s && il.From(&g.info) && g.refunded.CompareAndSwap(false, true) {
		inner = g.inner
	} else {
		return nil
	}
	if r, ok := s.l.(ratelimit.Refunder); ok {
		return r.Refund(ctx, inner, permits)
	}
	inner.Release()
	return nil
}

// IdleFor is the wrapped limiter's IdleFor; a wrapped limiter that is not
// a ratelimit.Idler is never idle.
func (s *Limiter) IdleFor() (time.Duration, bool) {
	if il, ok := s.l.(ratelimit.Idler); ok {
		return il.IdleFor()
	}
	return 0, false
}

// Stats is the wrapped limiter's Stats, whose Refused counts the refusals
// the shadow limiter granted; zero Stats when it has none.
func (s *Limiter) Stats() ratelimit.Stats {
	if st, ok := s.l.(interface{ Stats() ratelimit.Stats }); ok {
		return st.Stats()
	}
	return ratelimit.Stats{}
}

// Close closes the wrapped limiter when it is an io.Closer; later calls
// return ratelimit.ErrClosed. It is safe to call twice: the second call
// returns nil.
func (s *Limiter) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if c, ok := s.l.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

var (
	_ ratelimit.Idler            = (*Limiter)(nil)
	_ ratelimit.Refunder         = (*Limiter)(nil)
	_ ratelimit.ObservableWaiter = (*Limiter)(nil)
	_ io.Closer                  = (*Limiter)(nil)
)
