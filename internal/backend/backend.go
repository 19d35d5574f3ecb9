// Package backend is what the module's limiters (memory, redis,
// partitioned) share to make their leases from their models' decisions,
// and to wait on another limiter.
package backend

import (
	"context"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/leases"
)

// Lease makes the lease of d: a grant whose Release passes token to the
// Info's Releaser (none for Infos), or a refusal for reason (ReasonLimit when
// ReasonNone).
func Lease(is *leases.Infos, d ratelimit.Decision, reason ratelimit.Reason, token uint64) ratelimit.Lease {
	return ratelimit.Lease(is.Make(d.Granted, uint8(reason), d.Remaining, d.RetryAfter, d.ResetAfter, token))
}

// Grant makes a grant of i (a leases.GrantInfo) with d's figures.
func Grant(i *leases.Info, d ratelimit.Decision, token uint64) ratelimit.Lease {
	return ratelimit.Lease(i.Grant(d.Remaining, d.ResetAfter, token))
}

// Token returns the token of lease when it is a grant made with i.
func Token(lease ratelimit.Lease, i *leases.Info) (uint64, bool) {
	return leases.Lease(lease).Token(i)
}

// WaitObserved waits for permits on l, telling o (when not nil) of the
// time the call spends queued: l's WaitObserved when l is a
// ratelimit.ObservableWaiter; otherwise l's Wait, which cannot say whether
// it queued, told to o as queued for its whole duration.
func WaitObserved(ctx context.Context, l ratelimit.Limiter, permits int, o ratelimit.QueueObserver) (ratelimit.Lease, error) {
	if o == nil {
		return l.Wait(ctx, permits)
	}
	if ow, ok := l.(ratelimit.ObservableWaiter); ok {
		return ow.WaitObserved(ctx, permits, o)
	}
	return WaitTold(ctx, permits, o, func() (ratelimit.Lease, error) { return l.Wait(ctx, permits) })
}

// WaitTold runs wait, a Wait for permits on ctx that cannot say whether it
// queues, told to o (not nil) as queued for its whole duration.
func WaitTold(ctx context.Context, permits int, o ratelimit.QueueObserver, wait func() (ratelimit.Lease, error)) (ratelimit.Lease, error) {
	if ctx == nil {
		return wait() // an error, which nobody waited for
	}
	q := base.Queueing[ratelimit.Lease]{O: o, Ctx: ctx, Permits: permits}
	q.Join(time.Now)
	lease, err := wait()
	return q.Leave(time.Now, lease, err)
}
