package partitioned

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/check"
)

// reconfigureNew applies the last Reconfigure's config (rc, when not nil)
// to lim, a limiter just made by Config.New. A limiter that refuses it (of
// another algorithm: New may pick a config per key) keeps the config New
// gave it, as the live partitions that refused it did: its key is served
// all the same.
func reconfigureNew(lim ratelimit.Limiter, rc *ratelimit.Config) {
	if rc != nil {
		reconfigure(lim, *rc)
	}
}

// reconfigure applies cfg to lim when it can be reconfigured (ok, see
// control.Reconfigure); err is its answer.
func reconfigure(lim ratelimit.Limiter, cfg ratelimit.Config) (ok bool, err error) {
	err = control.Reconfigure(lim, cfg)
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	return true, err
}

// Reconfigure applies cfg to the limiter of every live partition that can
// be reconfigured (the others are left as they are), and to every
// limiter Config.New makes from now on, before its partition serves a
// call: a policy's limit changes for every key at once (see
// control.Reconfigure for what each limiter carries over). An invalid
// cfg, or one the partitions' limiters refuse (another algorithm: one live
// partition whose limiter can be reconfigured, or else a limiter New makes
// for the key "", is asked first), is an error wrapping
// ratelimit.ErrInvalidConfig that changes nothing. Should partitions of
// different configs refuse it (a New that picks a config per key), their
// errors are joined, each naming its key, and the others are reconfigured
// all the same. A live partition that refuses it keeps its config; one
// made later that refuses it gets the config New gives it (so, for such
// a key, the one exception to eviction changing no decision: a
// partition evicted and made again may not have the config an earlier
// Reconfigure gave it). Calls are applied one at a time.
func (l *Limiter) Reconfigure(cfg ratelimit.Config) error {
	if l == nil || l.cfg.New == nil {
		return fmt.Errorf("%w: partitioned: a Limiter must be made by New", ratelimit.ErrInvalidConfig)
	}
	if check.IsNil(cfg) {
		return fmt.Errorf("%w: partitioned: Reconfigure with a nil config", ratelimit.ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if l.closed.Load() {
		return ratelimit.ErrClosed
	}
	l.reconfMu.Lock()
	defer l.reconfMu.Unlock()
	if err := l.probe(cfg); err != nil {
		return err
	}
	l.reconf.Store(&cfg)
	var errs []error
	l.each(func(p *partition) bool {
		if _, err := reconfigure(p.limiter, cfg); err != nil {
			errs = append(errs, fmt.Errorf("partitioned: partition %q: %w", p.key, err))
		}
		return true
	})
	return errors.Join(errs...)
}

// each calls f with every live partition, under its shard's read lock,
// until f returns false.
func (l *Limiter) each(f func(p *partition) bool) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.RLock()
		for _, v := range s.slots {
			if v != 0 && !f(l.store.at(uint32(v)-1)) {
				s.mu.RUnlock()
				return
			}
		}
		s.mu.RUnlock()
	}
}

// probe reports whether the partitions' limiters take cfg, before any
// change: it reconfigures the limiter of one live partition that can be
// reconfigured (NoLimit and Shared ones are not), or else a limiter Config.New makes for
// the key "" (closed at once; when New refuses that key, or its limiter
// cannot be reconfigured, cfg cannot be checked and is
// taken). A cfg of another algorithm is so refused even while no
// partition is live.
func (l *Limiter) probe(cfg ratelimit.Config) error {
	asked, err := false, error(nil)
	l.each(func(p *partition) bool {
		if ok, rerr := reconfigure(p.limiter, cfg); ok {
			asked = true
			if rerr != nil {
				err = fmt.Errorf("partitioned: partition %q: %w", p.key, rerr)
			}
		}
		return !asked
	})
	if asked {
		return err
	}
	lim, err := l.cfg.New("")
	if err != nil || check.IsNil(lim) {
		return nil
	}
	_, err = reconfigure(lim, cfg)
	l.discard("", lim, nil)
	return err
}

// Reset puts the partition of key back in its initial state (see
// control.Reset), making it first when there is none (on Redis the
// state outlives the partition). It is an error wrapping
// errors.ErrUnsupported when the partition's limiter cannot reset, and one
// wrapping ErrNoPartition when MaxPartitions are busy (an Overflow
// limiter, shared, is never reset).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := l.check(ctx, 0); err != nil {
		return err
	}
	lim, p, _, err := l.get(key)
	if err != nil {
		return err
	}
	if p == nil {
		if lim == nil { // the refusal was counted: it is not a request's
			l.stats.refused.Add(-1)
		}
		return fmt.Errorf("%w: MaxPartitions are busy, so the key has no partition to reset", ErrNoPartition)
	}
	defer p.done()
	if err := control.Reset(ctx, lim); err != nil {
		return fmt.Errorf("partitioned: partition %q: %w", p.key, err)
	}
	return nil
}
