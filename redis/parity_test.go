package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/conformance"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
)

// ceilMicro rounds d up to the microsecond, the resolution of the
// durations the scripts reply.
func ceilMicro(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r > 0 {
		d += time.Microsecond - r
	}
	return d
}

// parity runs the same random arrival sequences against memory and redis
// (time pinned to the same fake clock), a third of them reservations
// settled later at a random cost (giving back, or charging up to twice the
// limit beyond them), and requires identical leases, to the microsecond.
// The refusal cache is off: this compares the scripts with the models (the
// cache's Remaining is as of the refusal; TestRefusalCache covers it).
// Each sequence has its own limiters, clock and random source; 16 run side
// by side, their calls batched together.
func parity(t *testing.T, client goredis.UniversalClient, sequences int) {
	for ai, a := range conformance.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			var refusals, settlements atomic.Int64
			errs := make([]error, sequences)
			var wg sync.WaitGroup
			slots := make(chan struct{}, 16)
			for seq := range sequences {
				wg.Add(1)
				slots <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					rng := rand.New(rand.NewSource(int64(7 + 1000*ai + seq)))
					errs[seq] = paritySequence(client, a, rng, &refusals, &settlements)
				}()
			}
			wg.Wait()
			for seq, err := range errs {
				if err != nil {
					t.Errorf("seq %d: %v", seq, err)
				}
			}
			if refusals.Load() == 0 || settlements.Load() == 0 {
				t.Fatalf("%d refusals, %d settlements compared", refusals.Load(), settlements.Load())
			}
		})
	}
}

// paritySequence is one sequence of parity, on a, its steps drawn from
// rng; it counts the refusals and settlements it compared, and returns the
// first difference.
func paritySequence(client goredis.UniversalClient, a conformance.Algorithm, rng *rand.Rand, refusals, settlements *atomic.Int64) error {
	ctx := context.Background()
	limit := 1 + rng.Intn(12)
	cfg := a.Config(limit, ratelimit.Queue{})
	clock := ratelimittest.NewClock()
	clock.Advance(time.Duration(rng.Int63n(int64(time.Hour))).Truncate(time.Microsecond))
	mem, err := memory.New(cfg, memory.WithClock(clock))
	if err != nil {
		return err
	}
	defer mem.Close()
	red, err := redis.New(client, fmt.Sprintf("parity-%d", keySeq.Add(1)), cfg, redis.WithClock(clock), redis.WithoutRefusalCache())
	if err != nil {
		return err
	}
	defer red.Close()
	var held, reserved [][2]ratelimit.Lease
	for i := 0; i < 60; i++ {
		var gap time.Duration
		switch rng.Intn(3) {
		case 0:
			gap = time.Duration(rng.Intn(50)) * time.Microsecond
		default:
			gap = time.Duration(rng.Int63n(int64(400 * time.Millisecond)))
		}
		clock.Advance(gap.Truncate(time.Microsecond))
		if len(held) > 0 && rng.Intn(3) == 0 {
			k := rng.Intn(len(held))
			held[k][0].Release()
			held[k][1].Release()
			held = append(held[:k], held[k+1:]...)
		}
		if len(reserved) > 0 && rng.Intn(3) == 0 {
			// Settle a reservation on both, giving back or
			// charging up to twice the limit beyond it.
			k := rng.Intn(len(reserved))
			actual := rng.Intn(3*limit + 1)
			err1 := control.Settle(ctx, mem, reserved[k][0], actual)
			err2 := control.Settle(ctx, red, reserved[k][1], actual)
			if (err1 == nil) != (err2 == nil) || (err1 != nil && !(!a.Rate && errors.Is(err1, errors.ErrUnsupported) && errors.Is(err2, errors.ErrUnsupported))) {
				return fmt.Errorf("step %d: Settle(%d): %v, %v", i, actual, err1, err2)
			}
			reserved = append(reserved[:k], reserved[k+1:]...)
			settlements.Add(1)
		}
		p := rng.Intn(limit + 1)
		acquire := ratelimit.Limiter.Acquire
		reserve := rng.Intn(3) == 0
		if reserve {
			acquire = func(l ratelimit.Limiter, ctx context.Context, p int) (ratelimit.Lease, error) {
				return control.Reserve(ctx, l, p)
			}
		}
		m, err1 := acquire(mem, ctx, p)
		r, err2 := acquire(red, ctx, p)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("step %d: errors %v, %v", i, err1, err2)
		}
		md, mok := m.RetryAfter()
		rd, rok := r.RetryAfter()
		if mok {
			md = ceilMicro(md)
		}
		if m.Acquired() != r.Acquired() || m.Remaining() != r.Remaining() ||
			ceilMicro(m.ResetAfter()) != r.ResetAfter() || md != rd || mok != rok {
			return fmt.Errorf("step %d (%#v, %d permits):\nmemory %v retry %v reset %v\nredis  %v retry %v reset %v",
				i, cfg, p, m, md, m.ResetAfter(), r, rd, r.ResetAfter())
		}
		if !m.Acquired() {
			refusals.Add(1)
		} else if reserve {
			reserved = append(reserved, [2]ratelimit.Lease{m, r})
		} else if p > 0 {
			held = append(held, [2]ratelimit.Lease{m, r})
		}
	}
	return nil
}

// TestParityMiniredis checks the scripts on miniredis too (where a user's
// own tests may run them), on fewer sequences: gopher-lua under the race
// detector is about 20 times slower than a server.
func TestParityMiniredis(t *testing.T) {
	t.Parallel()
	_, c := miniClient(t)
	parity(t, c, 20)
}

func TestParityRedis(t *testing.T) { parity(t, realClient(t), 100) }
