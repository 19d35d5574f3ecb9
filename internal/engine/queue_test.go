package engine_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/engine"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// TestLazyDueMatchesEager: a token bucket's queued reservations are told
// and served at the same instants whether every due instant moves at each
// give-back (the reference, engine.EagerDue) or each moves when its waiter
// reaches the head. Random sequences of Waits of 1 to 4 permits (some
// with deadlines, some over a burst shrunk by a reconfiguration), cancels
// of any waiter, direct Acquires, refunds, settlements for less and for
// more, clock steps, reconfigurations and resets, in both queue orders,
// must log the same answers, figures (to the microsecond) and counts of
// timers.
func TestLazyDueMatchesEager(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		least := 4 // bursts of 4 to 8: more reservations settled with waiters queued
		if seed%4 >= 2 {
			least = 1 // bursts of 1 to 8: waiters over a shrunk burst too
		}
		compare(t, seed, engine.EagerDue, func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config {
			return tokenbucket.Config{Rate: rate.Limit(1 + rng.Intn(8)), Burst: least + rng.Intn(9-least), Queue: q}
		})
	}
}

// TestQueueReplayKept: behind a queue of another algorithm, a refusal's
// figures (a full queue, a deadline that comes first) are the same whether
// the whole queue is replayed for each (the reference, engine.ReplayAll)
// or its replay is kept and extended as waiters join. The sequences are
// TestLazyDueMatchesEager's, on fixed and sliding windows, a sliding log
// and a concurrency limit, oldest first.
func TestQueueReplayKept(t *testing.T) {
	kinds := []func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config{
		func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config {
			return fixedwindow.Config{Limit: 2 + rng.Intn(5), Window: time.Duration(1+rng.Intn(3)) * time.Second, Queue: q}
		},
		func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config {
			return slidingwindow.Config{Limit: 2 + rng.Intn(5), Window: time.Duration(1+rng.Intn(3)) * time.Second, Queue: q}
		},
		func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config {
			return slidingwindow.Config{Limit: 2 + rng.Intn(5), Window: 2 * time.Second, Segments: 4, Queue: q}
		},
		func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config {
			return slidinglog.Config{Limit: 2 + rng.Intn(5), Window: time.Duration(1+rng.Intn(3)) * time.Second, Queue: q}
		},
		func(rng *rand.Rand, q ratelimit.Queue) ratelimit.Config {
			return concurrency.Config{Limit: 2 + rng.Intn(5), Queue: q}
		},
	}
	for seed := int64(1); seed <= 50; seed++ {
		compare(t, 2*seed-1, engine.ReplayAll, kinds[seed%int64(len(kinds))]) // odd seeds: oldest first
	}
}

// compare plays seed with *hook on (the reference) and off, and fails at
// the first step whose logs differ.
func compare(t *testing.T, seed int64, hook *bool, config func(*rand.Rand, ratelimit.Queue) ratelimit.Config) {
	t.Helper()
	ref := queueScenario(t, seed, hook, true, config)
	got := queueScenario(t, seed, hook, false, config)
	if i := firstDiff(ref, got); i >= 0 {
		t.Fatalf("seed %d, step %d:\nreference: %s\nnow:       %s", seed, i, at(ref, i), at(got, i))
	}
}

func firstDiff(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) {
			return i
		}
	}
	return -1
}

func at(log []string, i int) string {
	if i < len(log) {
		return log[i]
	}
	return "(end)"
}

// queueScenario plays the sequence of seed, with *hook set to on, on a
// limiter of configurations config draws (oldest first for odd seeds,
// newest first for even ones), and returns its log, a line per step.
func queueScenario(t *testing.T, seed int64, hook *bool, on bool, newConfig func(*rand.Rand, ratelimit.Queue) ratelimit.Config) []string {
	t.Helper()
	defer func(was bool) { *hook = was }(*hook)
	*hook = on
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	clock := ratelimittest.NewClock()
	order := ratelimit.OldestFirst
	if seed%2 == 0 {
		order = ratelimit.NewestFirst
	}
	queue := ratelimit.Queue{Limit: 24, Order: order}
	config := func() ratelimit.Config { return newConfig(rng, queue) }
	l, err := memory.New(config(), memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	type held struct {
		lease   ratelimit.Lease
		permits int
	}
	var grants, reservations []held
	// A waiter's answer: a grant joins grants, released or refunded by a
	// later step, never by the waiter's goroutine at a moment of its own.
	type answer struct {
		text  string
		lease ratelimit.Lease
	}
	type waiter struct {
		permits int
		cancel  context.CancelFunc
		ch      chan answer
		done    bool
	}
	var waiters []*waiter
	receive := func(w *waiter, a answer) string {
		w.done = true
		if a.lease.Acquired() {
			grants = append(grants, held{a.lease, w.permits})
		}
		return a.text
	}
	describe := func(lease ratelimit.Lease, err error) string {
		if err != nil {
			return "error " + err.Error()
		}
		// To the microsecond: a due instant worked out at another instant
		// may differ by the rounding of the bucket's float arithmetic.
		ra, ok := lease.RetryAfter()
		return fmt.Sprintf("%v %v remaining %d retry %v/%v reset %v", lease.Acquired(), lease.Reason(), lease.Remaining(),
			ra.Round(time.Microsecond), ok, lease.ResetAfter().Round(time.Microsecond))
	}
	// leftQueue collects the answers of the waiters that left the queue in
	// this step: once the permits of those still waiting add up to what
	// the limiter has queued. The answers are taken in the waiters' order,
	// whatever the order they arrived in.
	leftQueue := func() string {
		got := map[int]answer{}
		for deadline := time.Now().Add(5 * time.Second); ; {
			var waiting int64
			for i, w := range waiters {
				if _, in := got[i]; w.done || in {
					continue
				}
				select {
				case a := <-w.ch:
					got[i] = a
				default:
					waiting += int64(w.permits)
				}
			}
			s, err := control.Stats(l)
			if err != nil {
				t.Fatal(err)
			}
			if s.Queued == waiting {
				var told []string
				for _, i := range slices.Sorted(maps.Keys(got)) {
					told = append(told, fmt.Sprintf("w%d %s", i, receive(waiters[i], got[i])))
				}
				return fmt.Sprintf("%s | queued %d available %d timers %d", strings.Join(told, "; "), s.Queued, s.Available, clock.Pending())
			}
			if time.Now().After(deadline) {
				t.Fatalf("seed %d: %d permits queued, %d waiting", seed, s.Queued, waiting)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	var log []string
	for step := 0; step < 150; step++ {
		var what string
		switch op := rng.Intn(20); {
		case op < 6: // a Wait
			p := 1 + rng.Intn(4)
			what = fmt.Sprintf("wait w%d %d", len(waiters), p)
			var wctx context.Context
			var cancel context.CancelFunc
			if rng.Intn(3) == 0 { // a deadline on the limiter's clock
				d := time.Duration(rng.Int63n(int64(4 * time.Second)))
				wctx, cancel = context.WithDeadline(ctx, clock.Now().Add(d))
				what += fmt.Sprintf(" within %v", d)
			} else {
				wctx, cancel = context.WithCancel(ctx)
			}
			w := &waiter{permits: p, cancel: cancel, ch: make(chan answer, 1)}
			waiters = append(waiters, w)
			before, _ := control.Stats(l)
			go func() {
				lease, err := l.Wait(wctx, p)
				w.ch <- answer{describe(lease, err), lease}
			}()
			// Until it has queued, or been answered.
			for deadline := time.Now().Add(5 * time.Second); ; {
				s, _ := control.Stats(l)
				if s.Queued != before.Queued || s.Granted+s.Refused != before.Granted+before.Refused || len(w.ch) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("seed %d: Wait(%d) neither queued nor answered", seed, p)
				}
				time.Sleep(20 * time.Microsecond)
			}
		case op < 9: // cancel a waiter, any
			if len(waiters) == 0 {
				continue
			}
			k := rng.Intn(len(waiters))
			w := waiters[k]
			w.cancel()
			what = fmt.Sprintf("cancel w%d", k)
			if !w.done { // its answer, before the queue is looked at
				select {
				case a := <-w.ch:
					what += " " + receive(w, a)
				case <-time.After(5 * time.Second):
					t.Fatalf("seed %d: cancelled w%d not answered", seed, k)
				}
			}
		case op < 12: // an Acquire, or a reservation to settle later
			p := 1 + rng.Intn(3)
			if rng.Intn(3) == 0 {
				lease, err := l.Acquire(ctx, p)
				what = "acquire " + describe(lease, err)
				if lease.Acquired() {
					grants = append(grants, held{lease, p})
				}
			} else {
				lease, err := control.Reserve(ctx, l, p)
				what = "reserve " + describe(lease, err)
				if lease.Acquired() {
					reservations = append(reservations, held{lease, p})
				}
			}
		case op < 13: // refund a grant (release one of a concurrency limit)
			if len(grants) == 0 {
				continue
			}
			k := rng.Intn(len(grants))
			err := control.Refund(ctx, l, grants[k].lease, grants[k].permits)
			grants = slices.Delete(grants, k, k+1)
			what = fmt.Sprintf("refund %v", err)
		case op < 16: // settle a reservation, for less or for more
			if len(reservations) == 0 {
				continue
			}
			k := rng.Intn(len(reservations))
			actual := rng.Intn(3 * reservations[k].permits)
			err := control.Settle(ctx, l, reservations[k].lease, actual)
			reservations = slices.Delete(reservations, k, k+1)
			what = fmt.Sprintf("settle %d %v", actual, err)
		case op < 19:
			d := time.Duration(rng.Int63n(int64(800 * time.Millisecond)))
			clock.Advance(d)
			what = fmt.Sprintf("advance %v", d)
		case rng.Intn(2) == 0:
			cfg := config()
			what = fmt.Sprintf("reconfigure %+v %v", cfg, control.Reconfigure(l, cfg))
		default:
			what = fmt.Sprintf("reset %v", control.Reset(ctx, l))
		}
		log = append(log, what+" => "+leftQueue())
	}
	for _, w := range waiters {
		w.cancel()
	}
	return log
}
