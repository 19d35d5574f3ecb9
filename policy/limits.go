package policy

import (
	"context"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
)

// limits are a policy's limiters, as the Registry asks them: a
// *partitioned.Limiter over the Backend's Factory, or Memory's
// memory.Keyed.
type limits interface {
	ratelimit.Keyed
	Reconfigure(cfg ratelimit.Config) error
	Reset(ctx context.Context, key string) error
	Refund(ctx context.Context, key string, lease ratelimit.Lease, permits int) error
	Settle(ctx context.Context, key string, lease ratelimit.Lease, actual int) error
	Close() error
}

// memoryFactory is Memory's Factory: a memory.Factory, and the options of
// the memory.Keyed that the Registry keeps the policy's keys in.
type memoryFactory struct {
	*memory.Factory
	opts []memory.Option
}

// newLimits makes the limiters of policy p over f, its Backend's Factory.
func (r *Registry) newLimits(p Policy, f Factory) (limits, error) {
	if m, ok := f.(*memoryFactory); ok {
		opts := append(m.opts[:len(m.opts):len(m.opts)], memory.WithIdleTimeout(r.opts.IdleTimeout), memory.WithMaxKeys(r.opts.MaxPartitions))
		k, err := memory.NewKeyed(p.Config, opts...)
		if err != nil {
			return nil, err
		}
		return keyedMemory{k}, nil
	}
	l, err := partitioned.New(partitioned.Config{
		New:           f.ForKey,
		IdleTimeout:   r.opts.IdleTimeout,
		MaxPartitions: r.opts.MaxPartitions,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// keyedMemory is a memory.Keyed as the Registry asks it: a key's Reset,
// Refund and Settle are those of its limiter.
type keyedMemory struct{ *memory.Keyed }

func (k keyedMemory) Reset(ctx context.Context, key string) error {
	return control.Reset(ctx, k.For(key))
}

func (k keyedMemory) Refund(ctx context.Context, key string, lease ratelimit.Lease, permits int) error {
	return control.Refund(ctx, k.For(key), lease, permits)
}

func (k keyedMemory) Settle(ctx context.Context, key string, lease ratelimit.Lease, actual int) error {
	return control.Settle(ctx, k.For(key), lease, actual)
}
