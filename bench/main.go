// Command bench compares limitkit's algorithms and backends: what each
// costs per decision, how exactly it admits under steady, boundary and
// bursty overload, what scaling out to three replicas does, and the memory
// per key. It prints a markdown table and writes a self-contained HTML
// report with plots.
//
// It runs on embedded defaults with nothing but Go: in memory, and on
// miniredis in-process; with a redis-server on PATH it also starts one on a
// free loopback port (or uses -redis ADDR).
//
//	go run . -out report.html
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/internal/redistest"
)

type config struct {
	duration  time.Duration
	scenarios map[string]bool
	out       string
	redisAddr string
	noRedis   bool
	seed      int64
}

func main() {
	var c config
	var scen string
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "simulated length of each accuracy scenario")
	flag.StringVar(&scen, "scenarios", "cost,accuracy,scaleout,memory", "scenarios to run, comma-separated")
	flag.StringVar(&c.out, "out", "report.html", "HTML report path (empty: none)")
	flag.StringVar(&c.redisAddr, "redis", "", "address of a Redis server to use instead of starting one")
	flag.BoolVar(&c.noRedis, "no-redis", false, "skip the real Redis backend")
	flag.Int64Var(&c.seed, "seed", 1, "seed of the bursty traffic")
	flag.Parse()
	c.scenarios = map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		c.scenarios[strings.TrimSpace(s)] = true
	}
	if err := run(c, os.Stdout, progress()); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// progress reports to stderr only when it is a terminal.
func progress() func(string, ...any) {
	if fi, err := os.Stderr.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func(string, ...any) {}
	}
	return func(f string, a ...any) { fmt.Fprintf(os.Stderr, "\r\033[K"+f, a...) }
}

// results is everything a run measured.
type results struct {
	started   time.Time
	duration  time.Duration
	backends  []string
	notes     []string
	costs     []cost
	accuracy  []accuracy
	traffics  []traffic
	scaleOuts []scaleOut
	memory    []footprint
}

func run(c config, stdout io.Writer, say func(string, ...any)) error {
	res := &results{started: time.Now(), duration: c.duration}
	backends := []*backend{{name: "memory"}}
	mr, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer mr.Close()
	mini := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	defer mini.Close()
	backends = append(backends, &backend{name: "miniredis", client: mini})
	var real *goredis.Client
	switch {
	case c.noRedis:
		res.notes = append(res.notes, "real Redis skipped (-no-redis)")
	case c.redisAddr != "":
		real = goredis.NewClient(&goredis.Options{Addr: c.redisAddr, PoolSize: 64})
	default:
		if _, err := exec.LookPath("redis-server"); err != nil {
			res.notes = append(res.notes, "no redis-server on PATH: real Redis skipped")
			break
		}
		dir, err := os.MkdirTemp("", "ratelimit-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := redistest.StartServer(dir)
		if err != nil {
			return err
		}
		defer srv.Stop()
		real = goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64})
	}
	if real != nil {
		defer real.Close()
		if err := real.Ping(context.Background()).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		backends = append(backends, &backend{name: "redis", client: real})
	}
	for _, b := range backends {
		res.backends = append(res.backends, b.name)
	}

	if c.scenarios["cost"] {
		for _, g := range []int{1, 8} {
			res.costs = append(res.costs, xrateCost(g, 300_000))
		}
		for _, b := range backends {
			for _, a := range algorithms() {
				for _, g := range []int{1, 64} {
					n := 300_000
					switch {
					case b.name == "memory" && g == 64:
						g = 8 // the machine's parallelism is what matters in memory
					case b.name == "miniredis":
						n = 3_000
					case b.name == "redis":
						n = 10_000
					}
					say("cost: %s on %s, %d goroutines", a.name, b.name, g)
					r, err := costOf(b, a, g, n)
					if err != nil {
						return fmt.Errorf("cost %s on %s: %w", a.name, b.name, err)
					}
					res.costs = append(res.costs, r)
				}
			}
		}
	}
	if c.scenarios["accuracy"] {
		res.traffics = scenarios(c.duration, rand.New(rand.NewSource(c.seed)))
		for _, tr := range res.traffics {
			for _, b := range backends {
				for _, a := range algorithms() {
					if !a.rate {
						continue
					}
					say("accuracy: %s, %s on %s", tr.name, a.name, b.name)
					r, err := simulate(b, a, tr, c.duration)
					if err != nil {
						return fmt.Errorf("accuracy %s %s on %s: %w", tr.name, a.name, b.name, err)
					}
					res.accuracy = append(res.accuracy, r)
				}
			}
		}
	}
	if c.scenarios["scaleout"] {
		for _, b := range backends {
			for _, a := range algorithms() {
				if !a.rate {
					continue
				}
				say("scale-out: %s on %s", a.name, b.name)
				r, err := simulateScaleOut(b, a, 5*time.Second)
				if err != nil {
					return fmt.Errorf("scale-out %s on %s: %w", a.name, b.name, err)
				}
				res.scaleOuts = append(res.scaleOuts, r)
			}
		}
	}
	if c.scenarios["memory"] {
		for _, a := range algorithms() {
			say("memory: %s", a.name)
			res.memory = append(res.memory, heapPerLimiter(a, 100_000))
			if real != nil {
				f, err := redisPerKey(real, a, 100_000)
				if err != nil {
					return err
				}
				res.memory = append(res.memory, f)
			}
		}
	}
	say("")
	writeMarkdown(stdout, res)
	if c.out != "" {
		f, err := os.Create(c.out)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := writeHTML(f, res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nReport: %s\n", c.out)
	}
	return nil
}
