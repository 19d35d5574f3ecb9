package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
)

// FailurePolicy says what a limiter answers when Redis cannot decide
// (network error, timeout, server down).
type FailurePolicy uint8

const (
	FailError  FailurePolicy = iota // return an error wrapping ErrUnavailable (default)
	FailOpen                        // grant the request, with no limit applied: the lease's Limit and Remaining are -1 (but a calendar quota's caller whose clock is more than a period from Redis's gets FailError's error: that lasts)
	FailClosed                      // refuse it, with ReasonUnavailable
)

// String is the policy's name as in Go: "FailError", "FailOpen",
// "FailClosed"; another value is "FailurePolicy(n)".
func (p FailurePolicy) String() string {
	switch p {
	case FailError:
		return "FailError"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}

// failedOpen is the Infos of FailOpen's answers: grants made with no limit
// applied, whose figures (-1) say so, so that a client told of them (the
// RateLimit header fields httplimit writes) is not asked to slow down
// while Redis fails.
var failedOpen = backend.MakeOutcomes(-1)

// ended is ctx's error once ctx has ended or its deadline has passed: a
// client that bounds a call by the deadline (ContextTimeoutEnabled) fails
// it with its socket's timeout an instant before ctx's own timer fires,
// and the call still ended with its caller's deadline, not with a Redis
// failure.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// failed tells WithOnFailure's function of a failed call.
func (l *Limiter) failed(err error) {
	if l.o.onFailure != nil {
		l.o.onFailure(err)
	}
}

// fail applies the failure policy to a Redis error.
func (l *Limiter) fail(ctx context.Context, err error, fallback func(ratelimit.Limiter) (ratelimit.Lease, error)) (ratelimit.Lease, error) {
	if err := ended(ctx); err != nil {
		return ratelimit.Lease{}, err
	}
	l.failed(err)
	if l.o.fallback != nil {
		return fallback(l.o.fallback)
	}
	switch l.o.policy {
	case FailOpen:
		if strings.Contains(err.Error(), errClockFar) {
			// Not an outage, which ends: this process's clock is too far
			// from Redis's, and every call of its would be granted.
			return ratelimit.Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		// No limit was applied, and nothing was taken: no figures, nothing
		// to refund or release.
		return (&failedOpen).Lease(backend.Decision{Granted: true, Remaining: -1, RetryAfter: -1}, ratelimit.ReasonNone, 0), nil
	case FailClosed:
		return (&l.params().infos).Lease(backend.Decision{RetryAfter: -1}, ratelimit.ReasonUnavailable, 0), nil
	}
	return ratelimit.Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
}
