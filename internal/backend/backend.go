// Package backend is what the module's limiters (memory, redis,
// partitioned) share to make their leases from their models' decisions.
package backend

import (
	"github.com/limitkit/ratelimit"
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
