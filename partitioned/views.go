package partitioned

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// For returns the plain ratelimit.Limiter of one key, for Chain or for
// code written against the interface. It refunds (see Refund), so a Chain
// of it and a global limit is all or nothing, settles (see Settle), and
// resets (see Reset).
func (l *Limiter) For(key string) ratelimit.Limiter { return bound{l, key} }

type bound struct {
	l   *Limiter
	key string
}

// IdleFor is the idleness of the key's partition, so that a chain of
// it (with a global limit, say) can be a partition's limiter too: idle with
// no call in flight and its limiter idle; a missing partition holds nothing
// (as NoLimit, idle for ever).
func (b bound) IdleFor() (time.Duration, bool) {
	key := b.key
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
	il, _ := control.As[Idler](p.limiter) // create admits Idlers only
	return il.IdleFor()
}

func (b bound) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return b.l.Acquire(ctx, b.key, permits)
}

func (b bound) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return b.l.Wait(ctx, b.key, permits)
}

func (b bound) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	return b.l.Refund(ctx, b.key, lease, permits)
}

func (b bound) Reset(ctx context.Context) error { return b.l.Reset(ctx, b.key) }

// NoLimit returns a limiter that grants everything, for keys that must
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
	return (&unlimited).Lease(backend.Decision{Granted: true, Remaining: -1}, ratelimit.ReasonNone, 0), nil
}

func (n noLimit) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return n.Acquire(ctx, permits)
}

func (noLimit) IdleFor() (time.Duration, bool) { return math.MaxInt64, true }

// Shared wraps a limiter that several partitions share (one pool for every
// VIP key, say) for Config.New to return: partitioned never closes it (its
// owner does), nor reconfigures or resets it (its Reconfigure and Reset
// return an error wrapping errors.ErrUnsupported). It unwraps to l, so its
// other capabilities (Refund, Settle, idleness, Stats) are l's. Like any
// partition's limiter it must be an Idler, and its partitions are idle
// when it is, so that a refund never finds its
// partition gone while the grant still counts: while the shared limiter is
// busy, none of its partitions can be evicted, so share one between a
// bounded set of keys (for one limit over every key, chain a global
// limiter after the partitioned one instead). Shared of a nil limiter is
// nil.
func Shared(l ratelimit.Limiter) ratelimit.Limiter {
	if check.IsNil(l) {
		return nil
	}
	return shared{l}
}

// shared is not an io.Closer: partitioned closes what it owns only.
type shared struct{ l ratelimit.Limiter }

func (s shared) Acquire(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return s.l.Acquire(ctx, permits)
}

func (s shared) Wait(ctx context.Context, permits int) (ratelimit.Lease, error) {
	return s.l.Wait(ctx, permits)
}

func (s shared) Unwrap() ratelimit.Limiter { return s.l }

// Reconfigure is refused: the shared limiter's owner configures it.
func (s shared) Reconfigure(ratelimit.Config) error {
	return fmt.Errorf("partitioned: a Shared limiter is reconfigured by its owner: %w", errors.ErrUnsupported)
}

// Reset is refused: the shared limiter's owner resets it.
func (s shared) Reset(context.Context) error {
	return fmt.Errorf("partitioned: a Shared limiter is reset by its owner: %w", errors.ErrUnsupported)
}
