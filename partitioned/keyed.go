package partitioned

import (
	"context"
	"fmt"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
)

// Global is the ratelimit.Keyed of one limiter that every key shares: one
// limit for a whole service. Its For returns l for every key, so control
// reaches l's capabilities. Global of a nil limiter is nil.
func Global(l ratelimit.Limiter) ratelimit.Keyed {
	if check.IsNil(l) {
		return nil
	}
	return Func(func(string) ratelimit.Limiter { return l })
}

// Func is the ratelimit.Keyed that asks f for the limiter of each key: for
// a per-key limit chained with a global one, say,
//
//	partitioned.Func(func(ip string) ratelimit.Limiter { return ratelimit.Chain(perIP.For(ip), global) })
//
// f runs on every call, so keep it cheap (the chain above is one small
// allocation). f returning nil is an error wrapping
// ratelimit.ErrInvalidConfig. Its For is f, so control reaches the
// capabilities of each key's limiter.
type Func func(key string) ratelimit.Limiter

// Acquire is f(key).Acquire.
func (f Func) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	l, err := f.of(key)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	return l.Acquire(ctx, permits)
}

// Wait is f(key).Wait.
func (f Func) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	l, err := f.of(key)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	return l.Wait(ctx, permits)
}

// For is f(key); nil when f returns none.
func (f Func) For(key string) ratelimit.Limiter {
	l, _ := f.of(key)
	return l
}

func (f Func) of(key string) (ratelimit.Limiter, error) {
	if l := f(key); !check.IsNil(l) {
		return l, nil
	}
	return nil, fmt.Errorf("%w: partitioned: the Func returned no limiter for %q", ratelimit.ErrInvalidConfig, key)
}

var (
	_ ratelimit.Keyed = (*Limiter)(nil)
	_ ratelimit.Keyed = Func(nil)
)
