package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
)

// settlementKey carries a request's reservations on its context.
type settlementKey struct{}

// reservation is a policy's reservation for a request: its lease (made by
// ratelimit.Lease.Reserve), of the policy's limiter for key.
type reservation struct {
	l     ratelimit.Keyed
	key   string
	lease ratelimit.Lease
}

// withSettlement returns r, or r with the reservations of its policies
// with a Cost on its context, for Settle (one allocation, made only for
// requests that reserve).
func withSettlement(r *http.Request, ds []decided) *http.Request {
	var rs []reservation
	for _, d := range ds {
		if d.p.cost != nil {
			rs = append(rs, reservation{d.p.l, d.key, d.lease})
		}
	}
	if rs == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), settlementKey{}, rs))
}

// Settle settles, at actual permits, the reservations that Middleware made
// for the request whose context is ctx: those of its policies with a Cost
// (Options.Cost, Policy.Cost), each of which reserved its estimate.
// Reserved beyond actual comes back as a refund gives it back; actual
// beyond the reservation is charged without refusing (a token bucket in
// debt, a window over its limit), so that the key's next requests wait,
// or are refused with an exact Retry-After, until the debt is paid (see
// control.Settle). The response of this request carries the RateLimit
// fields of its reservation; the key's next response shows the settled
// figures. The handler calls it once it knows the cost (the usage an
// upstream reports, the bytes it sent), before it returns or later; ctx's
// end does not stop it.
//
// A request with no reservation (no Cost, or a ctx the middleware did not
// give), or settled already, is an error wrapping ratelimit.ErrInvalidLease;
// a negative actual one wrapping ratelimit.ErrInvalidPermits; a policy's
// limiter without For(key) (see ratelimit.Keyed) one wrapping
// errors.ErrUnsupported, as is a concurrency limit's (nothing to settle).
// The policies' errors are joined; each settles once.
func Settle(ctx context.Context, actual int) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if actual < 0 {
		return fmt.Errorf("%w: httplimit: actual cost %d is negative", ratelimit.ErrInvalidPermits, actual)
	}
	rs, _ := ctx.Value(settlementKey{}).([]reservation)
	if len(rs) == 0 {
		return fmt.Errorf("%w: httplimit: the request reserved nothing (see Options.Cost)", ratelimit.ErrInvalidLease)
	}
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, r := range rs {
		f, ok := r.l.(interface {
			For(string) ratelimit.Limiter
		})
		if !ok {
			errs = append(errs, fmt.Errorf("httplimit: %T has no For(key): %w", r.l, errors.ErrUnsupported))
			continue
		}
		if err := control.Settle(ctx, f.For(r.key), r.lease, actual); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// failed answers a request whose policy p could not decide: 503 when the
// limiter failed; 413 when the request's cost exceeds the limit (it can
// never be granted: waiting would not help), and 500 when the Cost
// function returned a negative cost.
func failed(w http.ResponseWriter, p *policy, err error) {
	switch {
	case p.cost != nil && errors.Is(err, ratelimit.ErrExceedsLimit):
		http.Error(w, "request cost exceeds the limit", http.StatusRequestEntityTooLarge)
	case p.cost != nil && errors.Is(err, ratelimit.ErrInvalidPermits):
		http.Error(w, "invalid request cost", http.StatusInternalServerError)
	default:
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
	}
}
