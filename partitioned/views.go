package partitioned

import (
	"context"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// For returns the plain ratelimit.Limiter of one resource, for Chain or for
// code written against the interface. It is a ratelimit.Refunder (see
// Refund), so a Chain of it and a global limit is all or nothing.
func (l *Limiter[R]) For(resource R) ratelimit.Limiter { return bound[R]{l, resource} }

type bound[R any] struct {
	l *Limiter[R]
	r R
}

// IdleFor is the idleness of the resource's partition, so that a chain of
// it (with a global limit, say) can be a partition's limiter too: idle with
// no call in flight and its limiter idle; a missing partition holds nothing
// (as NoLimit, idle for ever).
func (b bound[R]) IdleFor() (time.Duration, bool) {
	key := b.l.cfg.Key(b.r)
	s, h := b.l.hash(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, p := s.find(&b.l.store, key, h)
	if p == nil {
		return math.MaxInt64, true
	}
	if p.inflight.Load() != 0 {
		return 0, false
	}
	return p.limiter.(ratelimit.Idler).IdleFor() // create admits Idlers only
}

func (b bound[R]) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return b.l.Acquire(ctx, b.r, permits)
}

func (b bound[R]) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return b.l.Wait(ctx, b.r, permits)
}

func (b bound[R]) WaitObserved(ctx context.Context, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	return b.l.WaitObserved(ctx, b.r, permits, o)
}

func (b bound[R]) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	return b.l.Refund(ctx, b.r, lease, permits)
}

// NoLimit returns a limiter that grants everything, for resources that must
// never be limited (return it from Config.New for their keys). It is always
// idle, so such partitions cost nothing once unused. Like every limiter it
// returns ratelimit.ErrInvalidPermits for negative permits,
// ratelimit.ErrNilContext for a nil ctx and ctx.Err() for a done one.
func NoLimit() ratelimit.Limiter { return noLimit{} }

type noLimit struct{}

func (noLimit) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	if permits < 0 {
		return ratelimit.Lease{}, base.CheckPermits(permits, 0)
	}
	if err := base.CheckContext(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	return backend.Lease(&unlimited, ratelimit.Decision{Granted: true, Remaining: -1}, ratelimit.ReasonNone, 0), nil
}

func (n noLimit) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return n.Acquire(ctx, permits)
}

// WaitObserved is Wait: nothing queues.
func (n noLimit) WaitObserved(ctx context.Context, permits int, _ ratelimit.QueueObserver) (ratelimit.Lease, error) {
	return n.Acquire(ctx, permits)
}

func (noLimit) IdleFor() (time.Duration, bool) { return math.MaxInt64, true }

// isIdler reports whether lim can report idleness: a ratelimit.Idler, and
// for a Shared one, the limiter it shares too.
func isIdler(lim ratelimit.Limiter) bool {
	switch s := lim.(type) {
	case shared:
		return isIdler(s.l)
	case sharedRefunder:
		return isIdler(s.l)
	}
	_, ok := lim.(ratelimit.Idler)
	return ok
}

// Shared wraps a limiter that several partitions share (one pool for every
// VIP key, say) for Config.New to return: partitioned never closes it (its
// owner does). Like any partition's limiter it must be a ratelimit.Idler,
// and its partitions are idle when it is, so that a refund never finds its
// partition gone while the grant still counts: while the shared limiter is
// busy, none of its partitions can be evicted, so share one between a
// bounded set of keys (for one limit over every key, chain a global
// limiter after the partitioned one instead). Refund is passed on when l
// is a ratelimit.Refunder. Shared of a nil limiter is nil.
func Shared(l ratelimit.Limiter) ratelimit.Limiter {
	if check.IsNil(l) {
		return nil
	}
	if r, ok := l.(ratelimit.Refunder); ok {
		return sharedRefunder{shared{l}, r}
	}
	return shared{l}
}

type shared struct{ l ratelimit.Limiter }

func (s shared) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return s.l.Acquire(ctx, permits)
}

func (s shared) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return s.l.Wait(ctx, permits)
}

func (s shared) WaitObserved(ctx context.Context, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	return backend.WaitObserved(ctx, s.l, permits, o)
}

// IdleFor is the shared limiter's; never idle when it is not an Idler (New
// refuses such a partition).
func (s shared) IdleFor() (time.Duration, bool) {
	if il, ok := s.l.(ratelimit.Idler); ok {
		return il.IdleFor()
	}
	return 0, false
}

type sharedRefunder struct {
	shared
	r ratelimit.Refunder
}

func (s sharedRefunder) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	return s.r.Refund(ctx, lease, permits)
}

var (
	_ ratelimit.ObservableWaiter = bound[string]{}
	_ ratelimit.ObservableWaiter = noLimit{}
	_ ratelimit.ObservableWaiter = shared{}
	_ ratelimit.ObservableWaiter = sharedRefunder{}
)
