package hotkey

import (
	"math/rand/v2"
	"sync"
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

// simCases are the configurations of the fake-clock fleet: each offered
// about twice its limit (the fast bucket, a fraction of it: it is
// mostly full), with leases of 20ms.
var simCases = []struct {
	name  string
	cfg   ratelimit.Config
	limit float64 // permits per second in the long run
}{
	{"tokenbucket", tokenbucket.Config{Rate: 500, Burst: 40}, 500},
	{"tokenbucket-fast", tokenbucket.Config{Rate: 4000, Burst: 40}, 4000},
	{"tokenbucket-interval", tokenbucket.Config{Period: 10 * ms, PerPeriod: 5, Burst: 40}, 500},
	{"fixedwindow", fixedwindow.Config{Limit: 50, Window: 100 * ms}, 500},
	{"slidinglog", slidinglog.Config{Limit: 100, Window: 200 * ms}, 500},
}

// TestFleetFakeClock runs three processes' limiters on one key on a fake
// clock (the scripts' time pinned to it), in a random but reproducible
// order, and checks every grant against the algorithm's bound at the
// instant it was made. The order is adversarial: a process spends its
// lease at the last instant its deadline allows, then another takes the
// permits freed at that instant; processes are killed (their client
// closed: their lease is stranded, never given back) and closed (their
// lease given back), and new ones start.
func TestFleetFakeClock(t *testing.T) {
	t.Parallel()
	addr := redistest.Standalone(t)
	const expiry = 20 * ms
	for ci, c := range simCases {
		t.Run(c.name, func(t *testing.T) {
			clock := ratelimittest.NewClock()
			rng := rand.New(rand.NewPCG(35, uint64(ci)))
			var lagMu sync.Mutex
			lagRng := rand.New(rand.NewPCG(36, uint64(ci)))
			type proc struct {
				c *goredis.Client
				l *Limiter
			}
			start := func() proc {
				cl := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
				l, err := New(cl, "sim-"+c.name, c.cfg, WithClock(clock), WithExpiry(expiry), WithShare(0.5), WithTimeout(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				l.lag = func() { // up to 400us each way
					lagMu.Lock()
					d := time.Duration(lagRng.IntN(400)) * time.Microsecond
					lagMu.Unlock()
					clock.Advance(d)
				}
				return proc{cl, l}
			}
			var procs [3]proc
			for i := range procs {
				procs[i] = start()
			}
			defer func() {
				for _, p := range procs {
					p.l.Close()
					p.c.Close()
				}
			}()
			t0 := clock.Now()
			var spends []spend
			var kills, closes, lastInstant int
			acquire := func(i int, p int) bool {
				before := clock.Now().UnixNano()
				lease, err := procs[i].l.Acquire(bg, p)
				if err != nil {
					t.Fatalf("process %d: %v", i, err)
				}
				if lease.Acquired() && p > 0 {
					// Made between the readings: the clock moves during a
					// call to Redis, whose script decides the caller's p.
					spends = append(spends, spend{before, clock.Now().UnixNano(), int64(p)})
				}
				return lease.Acquired()
			}
			// toDeadline moves the clock to the last microsecond before the
			// deadline of l's lease, as a timer that fires late would
			// leave it: the lease's checks, which give it back before its
			// deadline, are stopped (what they do saves permits; the bound
			// must hold without them).
			toDeadline := func(l *Limiter) bool {
				l.mu.Lock()
				b := l.cur.Load()
				if b != nil && b.stopTimer != nil {
					b.stopTimer()
				}
				l.mu.Unlock()
				if b == nil || b.deadline.Sub(clock.Now()) <= time.Microsecond {
					return false
				}
				at := b.deadline.Add(-time.Microsecond) // the last instant it may be spent
				if rng.IntN(4) == 0 {
					at = b.deadline.Add(time.Duration(rng.IntN(100)) * time.Microsecond) // or just too late
				}
				clock.Set(at.Truncate(time.Microsecond))
				return true
			}
			for step := 0; step < 4000; step++ {
				i := rng.IntN(3)
				switch r := rng.IntN(100); {
				case r < 1:
					procs[i].c.Close() // killed: its lease is stranded until it expires
					procs[i] = start()
					kills++
				case r < 2:
					procs[i].l.Close() // its lease given back
					procs[i].c.Close()
					procs[i] = start()
					closes++
				case r < 4:
					// Quiet: a permit now and then, each process keeping
					// its lease alive while a bucket refills.
					for n := 0; n < 8; n++ {
						clock.Advance(expiry / 5)
						acquire(n%3, 1)
					}
				case r < 6:
					// The end of a window (of 100ms, a multiple of the
					// windows above): a process with a recent demand takes
					// a lease in its last half expiry, then spends it at
					// its deadline while the others spend all they can.
					now := clock.Now()
					end := now.Truncate(100 * ms).Add(100 * ms)
					if end.Sub(now) > expiry/2 {
						clock.Set(end.Add(-time.Duration(1+rng.IntN(int(expiry/2/time.Microsecond))) * time.Microsecond))
					}
					for n := 0; n < 5; n++ {
						acquire(i, 1)
						clock.Advance(time.Microsecond)
					}
					toDeadline(procs[i].l)
					for j := i; j < i+3; j++ {
						for n := 0; n < 100 && acquire(j%3, 1); n++ {
						}
					}
				case r < 12:
					// The last instant the lease allows: every process
					// spends all it can get at it.
					if toDeadline(procs[i].l) {
						lastInstant++
					}
					for j := i; j < i+3; j++ {
						for n := 0; n < 100 && acquire(j%3, 1); n++ {
						}
					}
				default:
					if rng.IntN(3) > 0 {
						clock.Advance(time.Duration(rng.IntN(int(expiry/10/time.Microsecond))) * time.Microsecond)
					}
					acquire(i, rng.IntN(4)) // 0: a status check
				}
			}
			if err := overAdmission(c.cfg, spends); err != nil {
				t.Fatalf("over-admission: %v", err)
			}
			var n int64
			for _, s := range spends {
				n += s.permits
			}
			span := clock.Now().Sub(t0)
			ratio := float64(n) / (c.limit * span.Seconds())
			t.Logf("%d permits in %v: %.2f of the limit; %d kills, %d closes, %d spends at a deadline", n, span, ratio, kills, closes, lastInstant)
			if ratio < 0.5 && c.limit < 1000 {
				t.Errorf("admitted %.2f of the limit, want at least half", ratio)
			}
		})
	}
}
