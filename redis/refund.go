package redis

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/base"
)

// Refund gives back the permits of lease, a grant of permits by this
// limiter, as refunder (control.Refund) says: in one round trip the script takes
// them back from where the grant was counted (the grant's instant is the
// lease's token), as if they had never been granted, and only what still
// counts: tokens less what refilled since the grant (as
// tokenbucket's model.Refund), a window's count while it is the current or
// previous one, the log's entry (sliding log, segmented window) while it is
// in the window; a grant followed by more than 128 newer log entries is not
// taken back, which bounds the script's work. For a concurrency lease it is
// Release. Refusals, status checks and FailOpen leases change nothing, nor
// do leases of limiters of another configuration; a lease of another
// handle on the same key and config is taken as this one's (the state is
// shared). A lease of the fallback (WithFallback) is refunded there when
// the fallback can refund (control.Refund).
func (l *Limiter) Refund(ctx context.Context, lease ratelimit.Lease, permits int) error {
	capacity := l.params().capacity
	if l.release {
		capacity = math.MaxInt64 // a lease holds what it holds, whatever the limit now
	}
	if err := base.CheckPermits(permits, capacity); err != nil {
		return err
	}
	if err := base.CheckContext(ctx); err != nil {
		return err
	}
	if l.isClosed() {
		return ratelimit.ErrClosed
	}
	var at uint64
	var ok bool
	if l.release {
		at, ok = l.owns(lease)
	} else {
		at, ok = (&l.params().infos[0]).Token(lease)
	}
	if !ok {
		// Not ours: the fallback's, when it granted while Redis failed.
		if err := control.Refund(ctx, l.o.fallback, lease, permits); !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		return nil
	}
	if l.release {
		(*releaser)(l).Release(at)
		return nil
	}
	if at == 0 || permits == 0 || l.params().unlimited {
		return nil
	}
	if _, err := l.call(ctx, l.localNow(), opRefund, int64(permits), int64(at)); err != nil {
		if err := ended(ctx); err != nil {
			return err
		}
		l.failed(err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l.refusal.Store(nil) // permits came back: a cached refusal may be wrong
	return nil
}
