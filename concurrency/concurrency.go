// Package concurrency limits how many permits are held at once: a permit is
// taken by Acquire or Wait and comes back when its lease is released.
//
// Behaviour: like golang.org/x/sync/semaphore, weighted. It limits work in
// progress, not a rate: a fast caller may take and release permits as often as
// it likes. A refusal has no RetryAfter, since permits come back on Release,
// not with time. Memory: one counter per key.
//
// Reconfigured while it runs (control.Reconfigure), holders keep their
// permits and release them as before; the new Limit applies to new
// requests, so none is granted until the holders fit it.
package concurrency

import (
	// For the memory engine compiled here: see internal/algo's doc.
	_ "sync"

	"github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/backend"
	_ "github.com/limitkit/ratelimit/internal/base"

	"fmt"
	"math"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/engine"
)

// Config configures a concurrency limiter.
type Config struct {
	// Limit is the most permits held at once. Required.
	Limit int
	// Queue configures Wait; the zero value waits in arrival order, as
	// long as the ctx of each Wait allows (see ratelimit.Queue).
	Queue ratelimit.Queue
}

const pkg = "concurrency"

// Validate reports the first invalid field, wrapping ratelimit.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := check.Count(pkg, "Limit", c.Limit, 1); err != nil {
		return err
	}
	return check.Queue(pkg, c.Queue)
}

// Capacity is Limit.
func (c Config) Capacity() int64 { return int64(c.Limit) }

// QueueOptions returns c.Queue.
func (c Config) QueueOptions() ratelimit.Queue { return c.Queue }

// state is the number of permits held.
type state struct {
	Held int64
}

// model is the reference model of a validated Config.
type model struct {
	engine.Defaults[state] // the optional methods its Caps leave out
	limit                  int64
}

// newModel validates c and returns its model.
func newModel(c Config) (model, error) {
	if err := c.Validate(); err != nil {
		return model{}, err
	}
	return model{limit: int64(c.Limit)}, nil
}

// Initial is the state with nothing held.
func (m *model) Initial() state { return state{} }

// Caps: permits come back on Release, and decisions do not read the time.
func (m *model) Caps() engine.Caps { return engine.Releases | engine.Timeless }

// Step decides a request for permits; permits == 0 is a status check.
// RetryAfter is always unknown (negative).
func (m *model) Step(s state, now, permits int64) (state, backend.Decision) {
	d := backend.Decision{RetryAfter: -1}
	if s.Held+max(permits, 1) <= m.limit {
		d.Granted = true
		s.Held += permits
	}
	d.Remaining = max(m.limit-s.Held, 0) // more held than a lowered limit: none left
	return s, d
}

// Release gives back permits held.
func (m *model) Release(s state, now, permits int64) state {
	s.Held -= permits
	return s
}

// Available is the number of permits not held.
func (m *model) Available(s state, now int64) int64 { return m.limit - s.Held }

// InitialAt is math.MinInt64 when nothing is held (the state is initial;
// since when is the backend's to track) and math.MaxInt64 while permits are
// held.
func (m *model) InitialAt(s state) int64 {
	if s.Held > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

func init() {
	algo.Register(&algo.Algorithm[Config, state]{
		Name: pkg,
		Model: func(c Config) (engine.Model[state], error) {
			m, err := newModel(c)
			return &m, err
		},
		Redis: func(c Config, o algo.RedisOptions) (algo.Redis, error) {
			return algo.Redis{Lua: []string{"concurrency"}, Suffixes: []string{":cc", ":cc:n"},
				Args: []any{c.Limit, int64(o.LeaseTTL / time.Microsecond)}}, nil
		},
		Unit: "concurrent-requests",
		Params: []algo.Param[Config]{
			algo.Int("limit", func(c *Config) *int { return &c.Limit }),
			algo.QueueOf(func(c *Config) *ratelimit.Queue { return &c.Queue }),
		},
		Describe: func(c Config) string { return fmt.Sprintf("concurrency: %d at once", c.Limit) },
	})
}
