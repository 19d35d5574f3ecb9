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
// partitioned.Global(shadow.New(l, f)), or a partitioned.Func that returns
// shadow.New(perKey.For(key), f), or a partitioned limiter whose Config.New
// wraps each partition's limiter.
package shadow

import (
	"context"
	"io"
	"math"
	"sync/atomic"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/base"
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
// whatever the limiter it wraps decides. It unwraps to the wrapped limiter,
// so the capabilities package control reaches (Reset, Reconfigure, Stats,
// whose Refused counts the refusals the shadow limiter granted) and
// partitioned's idleness are the wrapped limiter's; its own Refund takes
// back the grants it passed on (so a Chain that a later member refuses
// gives its grant back), and its Settle settles them there. It is an
// io.Closer, and safe for concurrent use.
type Limiter struct {
	l         ratelimit.Limiter
	onRefusal func(context.Context, Refusal)
	// free is the Outcome of the leases granted for the wrapped limiter's
	// refusals: no limit, nothing to release.
	free ratelimit.Outcome
	// known is the Outcome of the wrapped limiter's grants that hold
	// nothing to release, once one has been seen (the first one's: a
	// memory or redis rate limiter makes all its grants with one). Such a
	// grant is returned as a lease of hidden carrying the grant's token,
	// which allocates nothing, and Refund makes the wrapped limiter's lease
	// again from known and the token. Other grants (concurrency, Chain) are
	// each wrapped in a grant record.
	hidden ratelimit.Outcome
	known  atomic.Pointer[ratelimit.Outcome]
	closed atomic.Bool
}

// grant is a grant of the wrapped limiter that Refund cannot make again
// from its token: its lease is kept.
type grant struct {
	o        ratelimit.Outcome // no limit, the grant its Releaser
	s        *Limiter
	inner    ratelimit.Lease
	refunded atomic.Bool
}

// Release releases the wrapped limiter's lease (which is idempotent).
func (g *grant) Release(uint64) { g.inner.Release() }

// New returns l in shadow mode. onRefusal, when not nil, is called for
// every request l refused or could not decide (and that the shadow limiter
// granted; a status check, of 0 permits, that l answered with no permit
// left is not a refused request), on the caller's goroutine, before the
// call returns; it must be
// safe for concurrent use. The shadow limiter owns l: its Close closes l.
// New of a nil l is nil.
func New(l ratelimit.Limiter, onRefusal func(ctx context.Context, r Refusal)) *Limiter {
	if l == nil {
		return nil
	}
	return &Limiter{l: l, onRefusal: onRefusal, free: ratelimit.Outcome{Limit: -1}, hidden: ratelimit.Outcome{Limit: -1}}
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
	if s.onRefusal != nil && (permits > 0 || err != nil) { // a status check refuses no request
		s.onRefusal(ctx, Refusal{Permits: permits, Wait: wait, Lease: lease, Err: err})
	}
	return s.free.Lease(-1, 0, 0, 0), nil
}

// hide returns the shadow limiter's lease for a grant of the wrapped
// limiter: no limit, and the grant within.
func (s *Limiter) hide(lease ratelimit.Lease) ratelimit.Lease {
	if o := lease.Outcome(); o.Releaser == nil {
		known := s.known.Load()
		if known == nil && s.known.CompareAndSwap(nil, o) {
			known = o
		}
		if token, ok := known.Token(lease); ok {
			return s.hidden.Lease(-1, 0, 0, token)
		}
	}
	g := &grant{s: s, inner: lease}
	g.o = ratelimit.Outcome{Limit: -1, Releaser: g}
	return g.o.Lease(-1, 0, 0, 0)
}

// grantOf is the grant record of lease, a lease of s; nil for any other.
func (s *Limiter) grantOf(lease ratelimit.Lease) *grant {
	if o := lease.Outcome(); o != nil {
		if g, ok := o.Releaser.(*grant); ok && g.s == s && o == &g.o {
			return g
		}
	}
	return nil
}

// Refund gives back to the wrapped limiter a grant it made: through its
// Refund when it can (control.Refund), else by releasing the lease (as
// Chain does with members that cannot). A grant the shadow limiter keeps a
// record of (a concurrency limit's, a Chain's) is given back once; a rate
// grant is passed on as it is, and a second refund of it gives its permits
// again, as control.Refund says of any limiter. A lease granted for a
// refusal holds nothing, and refunding it does nothing, as does refunding
// a lease of another limiter.
func (s *Limiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if permits < 0 {
		return base.CheckPermits(permits, math.MaxInt64)
	}
	var inner ratelimit.Lease
	if token, ok := s.hidden.Token(lease); ok {
		// A rate grant: it holds nothing, and the wrapped limiter takes
		// a second refund of it as the first (control.Refund's contract).
		inner = s.known.Load().Lease(0, 0, 0, token)
	} else if g := s.grantOf(lease); g != nil && g.refunded.CompareAndSwap(false, true) {
		inner = g.inner
	} else {
		return nil
	}
	if r, ok := control.As[interface {
		Refund(context.Context, ratelimit.Lease, int) error
	}](s.l); ok {
		return r.Refund(ctx, inner, permits)
	}
	inner.Release()
	return nil
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

var _ io.Closer = (*Limiter)(nil)
