package hotkey

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
)

var bg = context.Background()

// server starts a redis-server for t and returns a client of it.
func server(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Standalone(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// step is one script call of a table and what it must reply. give names
// a lease of the table (by the step that took it) to give back with u
// permits unspent.
type step struct {
	at      time.Duration // from the clock's start
	op      string
	p, want int64
	give    int // 1-based index of the step whose lease is given back; 0: none
	u       int64

	granted   bool
	k         int64
	valid     time.Duration
	remaining int64
	retry     time.Duration // -1: unknown
}

// runSteps runs the steps on a limiter of cfg on a fake clock, the
// script's time pinned to it, checking every reply.
func runSteps(t *testing.T, cfg ratelimit.Config, steps []step, opts ...Option) {
	t.Helper()
	clock := ratelimittest.NewClock()
	l, err := New(server(t), "steps", cfg, append([]Option{WithClock(clock), WithShare(0.5)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	got := make([]reply, len(steps))
	for i, s := range steps {
		clock.Set(start.Add(s.at))
		var g giveBack
		if s.give > 0 {
			r := got[s.give-1]
			g = giveBack{id: "lease" + string(rune('a'+s.give-1)), h: r.k - steps[s.give-1].p, e: r.e, u: s.u}
		}
		r, err := l.call(s.op, s.p, s.want, "lease"+string(rune('a'+i)), g, clock.Now())
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		got[i] = r
		retry := r.retryAfter
		if retry < 0 {
			retry = -1
		}
		if r.granted != s.granted || r.k != s.k || r.valid != s.valid || r.remaining != s.remaining || retry != s.retry {
			t.Errorf("step %d (%s p=%d want=%d at %v): granted %v k %d valid %v remaining %d retry %v; want %v %d %v %d %v",
				i+1, s.op, s.p, s.want, s.at, r.granted, r.k, r.valid, r.remaining, retry, s.granted, s.k, s.valid, s.remaining, s.retry)
		}
	}
}

const ms = time.Millisecond

// TestTokenBucketArithmetic: burst 100, 1 token per ms, leases of 100ms
// holding at most 50 together. The live leases count toward the burst:
// refill stops at bucket + held = burst; an expired lease's unspent
// permits count as spent at its expiry; given back, they return to the
// bucket, once.
func TestTokenBucketArithmetic(t *testing.T) {
	runSteps(t, tokenbucket.Config{Rate: 1000, Burst: 100}, []step{
		{at: 0, op: opTake, p: 1, want: 40, granted: true, k: 40, valid: 100 * ms, remaining: 60, retry: -1},
		// 10 tokens refilled, but 39 are held: the bucket stops at 61.
		{at: 10 * ms, op: opPeek, granted: true, remaining: 61, retry: -1},
		// 20 of the 39 come back; the second give changes nothing.
		{at: 10 * ms, op: opGive, give: 1, u: 20, remaining: 81, retry: -1},
		{at: 10 * ms, op: opGive, give: 1, u: 20, remaining: 81, retry: -1},
		// Held at most 50: 2 for the caller, 50 held.
		{at: 10 * ms, op: opTake, p: 2, want: 100, granted: true, k: 52, valid: 100 * ms, remaining: 29, retry: -1},
		// Nothing more may be held: the caller's permits only, no lease.
		{at: 10 * ms, op: opTake, p: 1, want: 10, granted: true, k: 1, remaining: 28, retry: -1},
		// The lease expires at 110ms unspent: refill stopped at 50 (100
		// less the 50 held) until then; its permits count as spent.
		{at: 110 * ms, op: opPeek, granted: true, remaining: 50, retry: -1},
		{at: 110 * ms, op: opGive, give: 5, u: 50, remaining: 50, retry: -1},
		{at: 140 * ms, op: opPeek, granted: true, remaining: 80, retry: -1},
		// Empty it; a busy process (want 40) is served once a quarter of
		// its batch (10 tokens) is back: 10ms.
		{at: 140 * ms, op: opTake, p: 80, want: 80, granted: true, k: 80, remaining: 0, retry: -1},
		{at: 140 * ms, op: opTake, p: 1, want: 40, remaining: 0, retry: 10 * ms},
		{at: 145 * ms, op: opTake, p: 1, want: 40, remaining: 5, retry: 5 * ms},
		{at: 150 * ms, op: opTake, p: 1, want: 40, granted: true, k: 10, valid: 100 * ms, remaining: 0, retry: -1},
	})
}

// TestTokenBucketIntervalArithmetic: burst 10, 5 tokens every 10ms.
func TestTokenBucketIntervalArithmetic(t *testing.T) {
	runSteps(t, tokenbucket.Config{Period: 10 * ms, PerPeriod: 5, Burst: 10}, []step{
		{at: 0, op: opTake, p: 2, want: 7, granted: true, k: 7, valid: 100 * ms, remaining: 3, retry: -1},
		// One refill of 5 at 10ms, capped at 10 - 5 held.
		{at: 10 * ms, op: opPeek, granted: true, remaining: 5, retry: -1},
		{at: 20 * ms, op: opGive, give: 1, u: 5, remaining: 10, retry: -1},
		{at: 20 * ms, op: opTake, p: 10, want: 10, granted: true, k: 10, remaining: 0, retry: -1},
		// 1 token is due at the next refill, at 30ms.
		{at: 25 * ms, op: opTake, p: 1, want: 1, remaining: 0, retry: 5 * ms},
		{at: 30 * ms, op: opTake, p: 1, want: 1, granted: true, k: 1, remaining: 4, retry: -1},
	})
}

// TestFixedWindowArithmetic: 100 per second, leases of 100ms holding at
// most 50 together, valid only within their window.
func TestFixedWindowArithmetic(t *testing.T) {
	runSteps(t, fixedwindow.Config{Limit: 100, Window: time.Second}, []step{
		{at: 100 * ms, op: opTake, p: 1, want: 30, granted: true, k: 30, valid: 100 * ms, remaining: 70, retry: -1},
		{at: 150 * ms, op: opGive, give: 1, u: 10, remaining: 80, retry: -1},
		{at: 150 * ms, op: opGive, give: 1, u: 10, remaining: 80, retry: -1},
		// 50ms left in the window: a lease of 50ms, sized for it.
		{at: 950 * ms, op: opTake, p: 1, want: 31, granted: true, k: 16, valid: 50 * ms, remaining: 64, retry: -1},
		// 5ms left, under a tenth of the expiry: the caller's permits only.
		{at: 995 * ms, op: opTake, p: 2, want: 30, granted: true, k: 2, remaining: 62, retry: -1},
		// The window ended: its lease's permits do not come back into the
		// new one.
		{at: 1001 * ms, op: opGive, give: 4, u: 15, remaining: 100, retry: -1},
		{at: 1001 * ms, op: opTake, p: 1, want: 80, granted: true, k: 51, valid: 100 * ms, remaining: 49, retry: -1},
		{at: 1001 * ms, op: opTake, p: 49, want: 49, granted: true, k: 49, remaining: 0, retry: -1},
		{at: 1500 * ms, op: opTake, p: 1, want: 1, remaining: 0, retry: 500 * ms},
		{at: 1500 * ms, op: opPeek, remaining: 0, retry: 500 * ms},
	})
}

// TestSlidingLogArithmetic: 100 per second, leases of 100ms. A take's p
// are logged at its instant, its lease's permits at the lease's expiry; a
// lease given back is logged at that instant with what it spent.
func TestSlidingLogArithmetic(t *testing.T) {
	runSteps(t, slidinglog.Config{Limit: 100, Window: time.Second}, []step{
		{at: 0, op: opTake, p: 1, want: 30, granted: true, k: 30, valid: 100 * ms, remaining: 70, retry: -1},
		// 20 of its 29 spent: logged at 50ms.
		{at: 50 * ms, op: opGive, give: 1, u: 9, remaining: 79, retry: -1},
		{at: 50 * ms, op: opGive, give: 1, u: 9, remaining: 79, retry: -1},
		{at: 60 * ms, op: opTake, p: 1, want: 10, granted: true, k: 10, valid: 100 * ms, remaining: 69, retry: -1},
		// The p at 0 leaves at 1s; the 20 at 50ms at 1.05s; the lease not
		// given back (9 at its expiry, 160ms) at 1.16s.
		{at: 999 * ms, op: opPeek, granted: true, remaining: 69, retry: -1},
		{at: 1000 * ms, op: opPeek, granted: true, remaining: 70, retry: -1},
		{at: 1050 * ms, op: opPeek, granted: true, remaining: 90, retry: -1},
		{at: 1060 * ms, op: opPeek, granted: true, remaining: 91, retry: -1},
		{at: 1159 * ms, op: opPeek, granted: true, remaining: 91, retry: -1},
		{at: 1160 * ms, op: opTake, p: 100, want: 100, granted: true, k: 100, remaining: 0, retry: -1},
		// Full: it frees when the take at 1.16s leaves.
		{at: 1200 * ms, op: opTake, p: 1, want: 1, remaining: 0, retry: 960 * ms},
	})
}
