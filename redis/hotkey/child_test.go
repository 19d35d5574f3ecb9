package hotkey

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/redis"
)

// A child is this test binary run again as one process of a fleet: it
// acquires on one key from its goroutines between two wall-clock instants,
// records every decision (the wall clock read before and after the call:
// the decision was made between) in its file, and prints what it did. The
// records are written as the decisions are made, one write each, so that
// a process killed with SIGKILL leaves every grant it had recorded in the
// file (the kernel holds what was written); a grant made in the instant
// of the kill, before its record, is not seen.
type child struct {
	addr, key, cfg string // cfg names a realConfig
	exact          bool   // the exact limiter (package redis), not leases
	start, stop    time.Time
	rate           float64 // permits offered per second by the process; 0: as fast as it can
	then           time.Time
	thenRate       float64 // the rate from then on
	goroutines     int
	out            string // the records' file; "" for none
	expiry         time.Duration
}

const childEnv = "HOTKEY_CHILD"

func (c child) command() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFleetRealClock$", "-test.count=1", "-test.bench=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{c.addr, c.key, c.cfg, strconv.FormatBool(c.exact),
		strconv.FormatInt(c.start.UnixNano(), 10), strconv.FormatInt(c.stop.UnixNano(), 10),
		strconv.FormatFloat(c.rate, 'g', -1, 64), strconv.Itoa(c.goroutines), c.out, c.expiry.String(),
		strconv.FormatInt(c.then.UnixNano(), 10), strconv.FormatFloat(c.thenRate, 'g', -1, 64)}, ","))
	return cmd
}

// parseChild reads the child's spec from the environment; ok is false in
// a process that is no child.
func parseChild() (c child, ok bool, err error) {
	v := os.Getenv(childEnv)
	if v == "" {
		return c, false, nil
	}
	f := strings.Split(v, ",")
	if len(f) != 12 {
		return c, true, fmt.Errorf("%s=%q: want 12 fields", childEnv, v)
	}
	then, _ := strconv.ParseInt(f[10], 10, 64)
	c.then = time.Unix(0, then)
	c.thenRate, _ = strconv.ParseFloat(f[11], 64)
	c.addr, c.key, c.cfg, c.out = f[0], f[1], f[2], f[8]
	c.exact, _ = strconv.ParseBool(f[3])
	start, _ := strconv.ParseInt(f[4], 10, 64)
	stop, _ := strconv.ParseInt(f[5], 10, 64)
	c.start, c.stop = time.Unix(0, start), time.Unix(0, stop)
	c.rate, _ = strconv.ParseFloat(f[6], 64)
	c.goroutines, _ = strconv.Atoi(f[7])
	c.expiry, err = time.ParseDuration(f[9])
	return c, true, err
}

// childResult is what a child prints.
type childResult struct {
	decisions, granted, calls int64
	id                        string // its leases' id prefix
}

func (r childResult) String() string {
	return fmt.Sprintf("child: decisions=%d granted=%d calls=%d id=%s\n", r.decisions, r.granted, r.calls, r.id+"-")
}

func parseResult(out string) (childResult, error) {
	var r childResult
	i := strings.LastIndex(out, "child: ")
	if i < 0 {
		return r, fmt.Errorf("no result in %q", out)
	}
	_, err := fmt.Sscanf(out[i:], "child: decisions=%d granted=%d calls=%d id=%s", &r.decisions, &r.granted, &r.calls, &r.id)
	r.id = strings.TrimSuffix(r.id, "-")
	return r, err
}

// runChild is a child's whole life.
func runChild(t *testing.T, c child) {
	cfg, ok := realConfigs[c.cfg]
	if !ok {
		t.Fatalf("no config %q", c.cfg)
	}
	cl := goredis.NewClient(&goredis.Options{Addr: c.addr, PoolSize: 4 * c.goroutines})
	defer cl.Close()
	var l ratelimit.Limiter
	var res childResult
	var calls func() int64
	if c.exact {
		rl, err := redis.New(cl, c.key, cfg)
		if err != nil {
			t.Fatal(err)
		}
		l, calls = rl, func() int64 { return 0 } // counted by the server
	} else {
		hl, err := New(cl, c.key, cfg, WithExpiry(c.expiry))
		if err != nil {
			t.Fatal(err)
		}
		defer hl.Close()
		l, calls, res.id = hl, hl.Calls, hl.idBase
	}
	var f *os.File
	if c.out != "" {
		var err error
		if f, err = os.OpenFile(c.out, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// The id first, so that the parent knows whose leases are whose
		// even if this process is killed.
		if err := os.WriteFile(c.out+".id", []byte(res.id), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var off atomic.Int64
	var decisions, granted atomic.Int64
	time.Sleep(time.Until(c.start))
	var wg sync.WaitGroup
	for g := 0; g < c.goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			every := func(rate float64) time.Duration {
				if rate <= 0 {
					return 0
				}
				return time.Duration(float64(c.goroutines) / rate * float64(time.Second))
			}
			interval := every(c.rate)
			next := c.start.Add(time.Duration(g) * interval / time.Duration(c.goroutines))
			changed := false
			var rec [24]byte
			var n, ok int64
			for {
				now := time.Now()
				if !now.Before(c.stop) {
					break
				}
				if !changed && c.thenRate > 0 && !now.Before(c.then) {
					changed, interval = true, every(c.thenRate)
				}
				if interval > 0 {
					if d := next.Sub(now); d > 0 {
						time.Sleep(d)
					} else if d < -50*time.Millisecond {
						next = now // too far behind: what was missed is not offered
					}
					next = next.Add(interval)
				}
				before := time.Now()
				lease, err := l.Acquire(context.Background(), 1)
				after := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				n++
				permits := int64(-1) // a refusal's record
				if lease.Acquired() {
					ok++
					permits = 1
				}
				if f != nil {
					binary.LittleEndian.PutUint64(rec[0:], uint64(before.UnixNano()))
					binary.LittleEndian.PutUint64(rec[8:], uint64(after.UnixNano()))
					binary.LittleEndian.PutUint64(rec[16:], uint64(permits))
					if _, err := f.WriteAt(rec[:], off.Add(24)-24); err != nil {
						t.Error(err)
						return
					}
				}
			}
			decisions.Add(n)
			granted.Add(ok)
		}(g)
	}
	wg.Wait()
	res.decisions, res.granted, res.calls = decisions.Load(), granted.Load(), calls()
	fmt.Print(res.String())
}

// readSpends reads a child's records: its grants, and its refusals
// (their permits).
func readSpends(path string) (grants, refusals []spend, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i+24 <= len(b); i += 24 {
		x := spend{int64(binary.LittleEndian.Uint64(b[i:])), int64(binary.LittleEndian.Uint64(b[i+8:])), int64(binary.LittleEndian.Uint64(b[i+16:]))}
		switch {
		case x.permits > 0:
			grants = append(grants, x)
		case x.permits < 0:
			x.permits = -x.permits
			refusals = append(refusals, x)
		} // 0: a record not yet written when the process was killed
	}
	return grants, refusals, nil
}
