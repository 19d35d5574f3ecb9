package hotkey

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
)

var long = flag.Bool("hotkey.long", false, "run the real-clock fleet for 10s of steady load with 1s windows (a few seconds otherwise)")

// The configurations the children run, by name: 10,000 permits a second,
// in windows of 250ms (1s with -hotkey.long).
var realConfigs = map[string]ratelimit.Config{
	"tokenbucket":      tokenbucket.Config{Rate: 10_000, Burst: 1000},
	"fixedwindow":      fixedwindow.Config{Limit: 2500, Window: 250 * time.Millisecond},
	"slidinglog":       slidinglog.Config{Limit: 5000, Window: 500 * time.Millisecond},
	"fixedwindow-1s":   fixedwindow.Config{Limit: 10_000, Window: time.Second},
	"slidinglog-1s":    slidinglog.Config{Limit: 10_000, Window: time.Second},
	"tokenbucket-fast": tokenbucket.Config{Rate: 1e9, Burst: 1e9}, // the benchmark's: never refuses
	"fixedwindow-fast": fixedwindow.Config{Limit: 1e9, Window: time.Hour},
}

// TestFleetRealClock runs three OS processes (this test binary again) of 32
// goroutines on one key, offering together twice the limit, paced, for each
// algorithm: after a warm-up, a steady period, then one process is killed
// with SIGKILL (its lease stranded) and started again later. Every grant of
// every process, the killed one's included, is checked against the
// algorithm's bound (the grants whose calls lie wholly in a window or
// span): no over-admission at all. Then, from the counts, in each window
// (with -hotkey.long, for a fixed window and a token bucket) or over the
// windows of each period together (a sliding log, and every algorithm in
// the short runs; see below): admitted >= 95% of the limit in the steady
// period; the permits lost from the kill's window on at most the killed
// process's live leases, plus what the steady windows are allowed (5% of
// the limit, or the worst steady window's shortfall when more, up to 15%)
// and 2%; and, from one lease expiry after the kill, admitted >= 95% of the
// limit again by the two survivors (of what was offered, when that was
// less; 85% when the processes were starved, see held). From the kill on,
// each process offers the limit, as a load balancer would send the dead
// process's share to the others: twice the limit again. It counts; it
// asserts no duration. With -hotkey.long it runs 10s of steady load in 1s
// windows; a short run checks a sliding log's bound, and only reports its
// counts.
func TestFleetRealClock(t *testing.T) {
	if c, ok, err := parseChild(); ok {
		if err != nil {
			t.Fatal(err)
		}
		runChild(t, c)
		return
	}
	addr := redistest.Standalone(t)
	type run struct {
		cfg           string
		window        time.Duration // the windows of the under-admission counts
		expiry        time.Duration
		warm, steady  time.Duration
		down, restart time.Duration // the killed process's time down, and after its restart
	}
	// The killed process is down long enough that a whole window lies
	// between its leases' expiry and its restart even when the kill and
	// its reaping take 400ms on a loaded machine (they took over 200ms once).
	runs := []run{
		{"fixedwindow", 250 * time.Millisecond, 25 * time.Millisecond, 250 * time.Millisecond, time.Second, 850 * time.Millisecond, 200 * time.Millisecond},
		{"tokenbucket", 250 * time.Millisecond, 25 * time.Millisecond, 250 * time.Millisecond, time.Second, 850 * time.Millisecond, 200 * time.Millisecond},
		{"slidinglog", 500 * time.Millisecond, 25 * time.Millisecond, 500 * time.Millisecond, time.Second, 1100 * time.Millisecond, 200 * time.Millisecond},
	}
	if *long {
		runs = []run{
			{"fixedwindow-1s", time.Second, 50 * time.Millisecond, time.Second, 10 * time.Second, 2 * time.Second, time.Second},
			{"tokenbucket", time.Second, 50 * time.Millisecond, time.Second, 10 * time.Second, 2 * time.Second, time.Second},
			{"slidinglog-1s", time.Second, 50 * time.Millisecond, time.Second, 10 * time.Second, 2 * time.Second, time.Second},
		}
	}
	const limitRate = 10_000.0 // permits per second, every configuration above
	for _, r := range runs {
		t.Run(r.cfg, func(t *testing.T) {
			cfg := realConfigs[r.cfg]
			dir := t.TempDir()
			key := "fleet-" + r.cfg + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			start := time.Now().Add(300 * time.Millisecond) // the children's start-up
			// The kill falls early in a window, while the processes take
			// leases of it.
			kill := start.Add(r.warm + r.steady).Truncate(r.window).Add(r.window / 10)
			restart := kill.Add(r.down)
			stop := restart.Add(r.restart)
			spec := func(i int, from time.Time) child {
				return child{addr: addr, key: key, cfg: r.cfg, start: from, stop: stop, rate: 2 * limitRate / 3, then: kill, thenRate: limitRate,
					goroutines: 32, out: filepath.Join(dir, "records-"+strconv.Itoa(i)), expiry: r.expiry}
			}
			startChild := func(c child) *childProc {
				p := &childProc{cmd: c.command(), out: &strings.Builder{}}
				p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
				if err := p.cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return p
			}
			procs := []*childProc{startChild(spec(0, start)), startChild(spec(1, start)), startChild(spec(2, start))}
			time.Sleep(time.Until(kill))
			if err := procs[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			procs[2].cmd.Wait()
			killedAt := time.Now()
			// Its live leases, as Redis holds them once it is dead.
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			defer c.Close()
			id, _ := readFile(filepath.Join(dir, "records-2.id"))
			stranded := strandedBy(t, c, cfg, key, id)
			time.Sleep(time.Until(restart))
			procs = append(procs, startChild(spec(3, restart)))
			for i, p := range procs {
				if i == 2 {
					continue
				}
				if err := p.cmd.Wait(); err != nil {
					t.Fatalf("child %d: %v\n%s", i, err, p.out)
				}
			}
			var all, refused []spend
			for i := range procs {
				g, r, err := readSpends(filepath.Join(dir, "records-"+strconv.Itoa(i)))
				if err != nil {
					t.Fatal(err)
				}
				all, refused = append(all, g...), append(refused, r...)
			}
			if err := overAdmission(cfg, all); err != nil {
				t.Fatalf("over-admission: %v (%d grants)", err, len(all))
			}
			// Under-admission, counted by the instants the calls began.
			perWindow := limitRate * r.window.Seconds()
			sum := func(ss []spend, from, to time.Time) float64 {
				var n int64
				for _, s := range ss {
					if s.from >= from.UnixNano() && s.from < to.UnixNano() {
						n += s.permits
					}
				}
				return float64(n)
			}
			count := func(from, to time.Time) float64 { return sum(all, from, to) }
			windows := func(from, to time.Time) []time.Time { // starts of whole windows in [from, to)
				var ws []time.Time
				for w := from.Truncate(r.window).Add(r.window); !w.Add(r.window).After(to); w = w.Add(r.window) {
					ws = append(ws, w)
				}
				return ws
			}
			// Each check counts whole windows. A sliding log under overload
			// admits in waves one Window apart, and a stall of a process
			// shifts them for good (the exact limiter's as much): a window's
			// count then depends on where the waves fall in it, so its
			// checks count the windows of each period together; so do the
			// short runs' of every algorithm, which share the processors
			// with other tests (a process starved for a while strands its
			// lease as a killed one does, and offers late).
			_, log := cfg.(slidinglog.Config)
			together := log || !*long
			perCount := func(ws []time.Time) [][]time.Time {
				if together && len(ws) > 0 {
					return [][]time.Time{ws}
				}
				var each [][]time.Time
				for _, w := range ws {
					each = append(each, []time.Time{w})
				}
				return each
			}
			countAll := func(ws []time.Time) (n, offered float64) {
				for _, w := range ws {
					n += count(w, w.Add(r.window))
					offered += sum(all, w, w.Add(r.window)) + sum(refused, w, w.Add(r.window))
				}
				return n, offered
			}
			ratio := func(ws []time.Time) string {
				var out []string
				for _, w := range ws {
					n, offered := countAll([]time.Time{w})
					out = append(out, fmt.Sprintf("%.3f (offered %.2f)", n/perWindow, offered/perWindow))
				}
				return strings.Join(out, " ")
			}
			// The offered load is set at twice the limit, but a process
			// starved of processor time offers less: windows are held to
			// 95% of what was offered in them when that was under the limit.
			// A short run of a sliding log is only reported: sharing two
			// processors with other tests, its waves shift with every stall
			// (a starved process's lease logged at its expiry), and 3s of
			// them say little; the 10s runs check it.
			asserted := !log || *long
			// Processes starved of processor time offer less than the load
			// meant (1.5 times the limit in the steady windows, against
			// twice), and their leases adapt late: such a run is held to
			// 85% of what was offered rather than 95%. The bound
			// (over-admission, above) is the same whatever the load.
			steady := windows(start.Add(r.warm), kill)
			_, steadyOffered := countAll(steady)
			loaded := steadyOffered >= 1.5*perWindow*float64(len(steady))
			held := 0.95
			if !loaded {
				held = 0.85
			}
			check := func(what string, ws []time.Time) {
				for _, g := range perCount(ws) {
					n, offered := countAll(g)
					if want := held * min(perWindow*float64(len(g)), offered); n < want && asserted {
						t.Errorf("%s: %d windows from %v admitted %.0f, under %.0f%% of the limit %.0f (offered %.0f)",
							what, len(g), g[0].Format("15:04:05.000"), n, 100*held, perWindow*float64(len(g)), offered)
					}
				}
			}
			check("steady", steady)
			// What this machine's load cost the worst steady window: the
			// windows' mean hides it, as a window that counts a stalled
			// call begun in the one before counts over the limit.
			shortfall := 0.0 // per window
			for _, w := range steady {
				n, _ := countAll([]time.Time{w})
				shortfall = max(shortfall, perWindow-n)
			}
			// The kill's window (a sliding log: from it to the restart):
			// what the dead process held is lost until its leases expire,
			// on top of what a steady window may lose (what check allows,
			// or the worst steady window's shortfall when more, up to 15%)
			// while the survivors' demand jumps to the limit, counted from
			// what was offered when that was under the limit. (Windows are
			// counted by the instants the calls began: 2% for the grants
			// made across a window's edges.)
			kw := kill.Truncate(r.window)
			down := []time.Time{kw}
			if together {
				down = append(down, windows(kw, restart)...)
			}
			var killN, due float64 // admitted, and what could have been
			for _, w := range down {
				n, offered := countAll([]time.Time{w})
				killN, due = killN+n, due+min(perWindow, offered)
			}
			n := float64(len(down))
			steadyLoss := min(max(shortfall, (1-held)*perWindow), 0.15*perWindow)
			if lost, allowed := due-killN, float64(stranded)+n*steadyLoss+n*perWindow/50; lost > allowed && asserted {
				t.Errorf("%d windows from the kill's admitted %.0f of %.0f: lost %.0f, more than the killed process's leases (%d), a steady window's loss (%.0f a window) and 2%%",
					len(down), killN, due, lost, stranded, steadyLoss)
			}
			// Recovery within one expiry: the survivors' windows from then
			// until the restart, the dead process's leases expired, lose no
			// more than a steady window may, and 2% at the windows' edges,
			// as the kill's do.
			rec := windows(killedAt.Add(r.expiry), restart)
			for _, g := range perCount(rec) {
				var recN, recDue float64
				for _, w := range g {
					n, offered := countAll([]time.Time{w})
					recN, recDue = recN+n, recDue+min(perWindow, offered)
				}
				n := float64(len(g))
				if lost, allowed := recDue-recN, n*steadyLoss+n*perWindow/50; lost > allowed && asserted {
					t.Errorf("after the kill and one expiry: %d windows from %v admitted %.0f of %.0f: lost %.0f, more than a steady window's loss (%.0f a window) and 2%%",
						len(g), g[0].Format("15:04:05.000"), recN, recDue, lost, steadyLoss)
				}
			}
			if len(rec) == 0 {
				t.Errorf("no whole window between the kill's expiry and the restart")
			}
			var decided, granted int64
			for i, p := range procs {
				if i == 2 {
					continue
				}
				res, err := parseResult(p.out.String())
				if err != nil {
					t.Fatal(err)
				}
				decided, granted = decided+res.decisions, granted+res.granted
			}
			t.Logf("%d grants checked, none over the bound; steady windows admitted %s of the limit; from the kill's window %s (stranded %d); after one expiry %s; survivors and restarted process: %d of %d requests granted",
				len(all), ratio(steady), ratio(down), stranded, ratio(rec), granted, decided)
			if !loaded {
				t.Logf("the processes were starved: the steady windows were offered %.2f of the limit, under 1.5; held to 85%% of what was offered", steadyOffered/(perWindow*float64(len(steady))))
			}
		})
	}
}

type childProc struct {
	cmd *exec.Cmd
	out *strings.Builder
}

// strandedBy returns the permits held by the live leases of the process
// whose lease ids start with id.
func strandedBy(t *testing.T, c goredis.UniversalClient, cfg ratelimit.Config, key, id string) int64 {
	suffix := map[string]string{"tokenbucket": ":tbl:l", "fixedwindow": ":fwl:l", "slidinglog": ":sll:l"}
	var s string
	switch cfg.(type) {
	case tokenbucket.Config:
		s = suffix["tokenbucket"]
	case fixedwindow.Config:
		s = suffix["fixedwindow"]
	case slidinglog.Config:
		s = suffix["slidinglog"]
	}
	ms, err := c.ZRange(bg, "ratelimit:{"+key+"}"+s, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range ms {
		if f := strings.Fields(m); len(f) == 2 && id != "" && strings.HasPrefix(f[0], id+".") {
			h, _ := strconv.ParseInt(f[1], 10, 64)
			n += h
		}
	}
	return n
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
