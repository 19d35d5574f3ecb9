// Command bench compares limitkit's algorithms and backends: what each
// costs per decision, how exactly it admits under steady, boundary and
// bursty overload, what scaling out to three replicas does, the memory per
// key, and, on Redis, limitkit beside go-redis/redis_rate. It prints a
// markdown report and writes a self-contained HTML report with plots.
//
// It runs on embedded defaults with nothing but Go: in memory, and on
// miniredis in-process; with a redis-server on PATH it starts one on a free
// loopback port (or uses -redis ADDR) and measures that instead.
//
// Every measurement is a step of its own: a step that fails is named, the
// others still run, and the reports hold whatever was measured. The exit
// status is non-zero only when a step failed.
//
//	go run . -out report.html
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
	// scale multiplies the number of decisions each cost, memory and peer
	// step makes (1 when zero); tests run the whole program at a fraction.
	scale float64
}

// allScenarios is every scenario, in the order they run.
const allScenarios = "cost,accuracy,scaleout,memory,peers"

func main() {
	var c config
	var scen string
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "simulated length of each accuracy scenario")
	flag.StringVar(&scen, "scenarios", allScenarios, "scenarios to run, comma-separated")
	flag.StringVar(&c.out, "out", "report.html", "HTML report path (empty: none)")
	flag.StringVar(&c.redisAddr, "redis", "", "address of a Redis server to use instead of starting one")
	flag.BoolVar(&c.noRedis, "no-redis", false, "skip the real Redis backend (miniredis stands in)")
	flag.Int64Var(&c.seed, "seed", 1, "seed of the bursty traffic")
	flag.Parse()
	c.scenarios = map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(strings.Split(allScenarios, ","), s) {
			fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (want some of %s)\n", s, allScenarios)
			os.Exit(2)
		}
		c.scenarios[s] = true
	}
	if _, err := run(c, os.Stdout, newProgress(os.Stderr)); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// progress shows the step running and how far along the run is, on one
// line rewritten in place, when w is a terminal. Otherwise it stays quiet
// but for failed steps, one line each.
type progress struct {
	w     io.Writer // nil: silent
	live  bool
	start time.Time
}

func newProgress(f *os.File) *progress {
	fi, err := f.Stat()
	return &progress{w: f, live: err == nil && fi.Mode()&os.ModeCharDevice != 0, start: time.Now()}
}

// step shows step i of n starting, done of the run's weight behind it.
func (p *progress) step(i, n int, done float64, name string) {
	if p == nil || p.w == nil || !p.live {
		return
	}
	fmt.Fprintf(p.w, "\r\033[K[%2.0f%% %3.0fs, step %d of %d] %s", 100*done, time.Since(p.start).Seconds(), i+1, n, name)
}

func (p *progress) failed(name string, err error) {
	if p == nil || p.w == nil {
		return
	}
	if p.live {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "FAILED %s: %v\n", name, err)
}

func (p *progress) done() {
	if p != nil && p.w != nil && p.live {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// results is everything a run measured.
type results struct {
	started   time.Time
	elapsed   time.Duration
	duration  time.Duration
	env       environment
	backends  []string
	notes     []string
	failures  []failure
	spent     []spent // time per group of steps, in the order they ran
	costs     []cost
	accuracy  []accuracy
	traffics  []traffic
	scaleOuts []scaleOut
	memory    []footprint
	seed      int64 // the bursty scenario's
}

// environment is what the figures were measured on.
type environment struct {
	cpus              int
	cpu, goos, goarch string
	goVersion         string
	redis             string // the Redis decisions ran on: version, or miniredis
}

// failure is a step that failed, by name.
type failure struct {
	step string
	err  error
}

// spent is the wall time of a group of steps.
type spent struct {
	group string
	steps int
	d     time.Duration
}

// step is one measurement: group is its report section, name what progress
// and failures call it, weight its share of the run's time (about its
// seconds on a 2-core machine), by which progress counts how far along the
// run is.
type step struct {
	group, name string
	weight      float64
	do          func(ctx context.Context) error
}

// stepTimeout bounds a step whose backend stops answering: its decisions
// then fail with the context's error, and the run goes on.
const stepTimeout = 2 * time.Minute

// runSteps runs every step, however many fail or panic, recording the
// failures by name and the time each group took.
func runSteps(res *results, steps []step, p *progress) {
	var total, done float64
	for _, s := range steps {
		total += s.weight
	}
	for i, s := range steps {
		p.step(i, len(steps), done/max(total, 1e-9), s.name)
		done += s.weight
		t0 := time.Now()
		if err := runStep(s); err != nil {
			res.failures = append(res.failures, failure{s.name, err})
			p.failed(s.name, err)
		}
		d := time.Since(t0)
		if k := len(res.spent) - 1; k >= 0 && res.spent[k].group == s.group {
			res.spent[k].steps++
			res.spent[k].d += d
		} else {
			res.spent = append(res.spent, spent{s.group, 1, d})
		}
	}
	p.done()
}

func runStep(s step) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return s.do(ctx)
}

// run measures what c asks, writes the markdown report to stdout and the
// HTML report to c.out, and returns what it measured; the error names the
// steps that failed.
func run(c config, stdout io.Writer, p *progress) (*results, error) {
	if c.scale == 0 {
		c.scale = 1
	}
	res := &results{started: time.Now(), duration: c.duration, seed: c.seed, env: environment{
		cpus: runtime.NumCPU(), cpu: cpuModel(), goos: runtime.GOOS, goarch: runtime.GOARCH, goVersion: runtime.Version()}}
	mem := &backend{name: "memory"}
	backends := []*backend{mem}
	var shared *backend // the Redis backend: a real server, or miniredis standing in
	var real *goredis.Client
	var serverDir string // where this run's servers keep their files; empty with -redis
	var setup []step
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	switch {
	case c.noRedis:
		res.notes = append(res.notes, "Real Redis skipped (-no-redis)")
	case c.redisAddr == "" && !onPath("redis-server"):
		res.notes = append(res.notes, "No redis-server on PATH: real Redis skipped")
	default:
		setup = append(setup, step{"setup", "redis: start and ping the server", 0.1, func(ctx context.Context) error {
			addr := c.redisAddr
			if addr == "" {
				dir, err := os.MkdirTemp("", "ratelimit-bench")
				if err != nil {
					return err
				}
				cleanup = append(cleanup, func() { os.RemoveAll(dir) })
				serverDir = dir
				srv, err := redistest.StartServer(dir)
				if err != nil {
					return err
				}
				cleanup = append(cleanup, srv.Stop)
				addr = srv.Addr
			}
			client := newClient(addr)
			cleanup = append(cleanup, func() { client.Close() })
			v, err := redisVersion(ctx, client)
			if err != nil {
				return err
			}
			real, shared = client, &backend{name: "redis", client: client, addr: addr}
			res.env.redis = "Redis " + v
			return nil
		}})
	}
	runSteps(res, setup, p)
	if shared == nil {
		// miniredis runs the same scripts in process, so the decisions it
		// shows are Redis's; its costs are those of a Lua interpreter in
		// this process, not of Redis, so it gets no cost rows.
		mr, err := miniredis.Run()
		if err != nil {
			res.failures = append(res.failures, failure{"miniredis: start", err})
		} else {
			cleanup = append(cleanup, mr.Close)
			mini := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
			cleanup = append(cleanup, func() { mini.Close() })
			shared = &backend{name: "miniredis", client: mini}
			res.env.redis = "miniredis (in-process emulation: decisions only, no costs)"
			res.notes = append(res.notes, "Miniredis stands in for Redis: its decisions are the Redis scripts', its costs are not Redis's, so it has no cost rows")
		}
	}
	if shared != nil {
		backends = append(backends, shared)
	}
	for _, b := range backends {
		res.backends = append(res.backends, b.name)
	}
	runSteps(res, plan(c, res, backends, real, serverDir), p)
	res.elapsed = time.Since(res.started)

	writeMarkdown(stdout, res)
	if c.out != "" {
		if err := writeHTMLFile(c.out, res); err != nil {
			res.failures = append(res.failures, failure{"write " + c.out, err})
		} else {
			path, err := filepath.Abs(c.out)
			if err != nil {
				path = c.out
			}
			fmt.Fprintf(stdout, "\nReport: %s\n", path)
		}
	}
	if len(res.failures) > 0 {
		var names []string
		for _, f := range res.failures {
			names = append(names, f.step)
		}
		return res, fmt.Errorf("%d step(s) failed (the reports hold the rest): %s", len(res.failures), strings.Join(names, "; "))
	}
	return res, nil
}

// plan is the steps of the chosen scenarios. real is the real Redis client
// (nil without one), for the steps only a real server makes sense on;
// serverDir, when set, lets a step start a server of its own there.
func plan(c config, res *results, backends []*backend, real *goredis.Client, serverDir string) []step {
	var steps []step
	add := func(group, name string, weight float64, do func(ctx context.Context) error) {
		steps = append(steps, step{group, name, weight, do})
	}
	n := func(base int) int { return max(int(float64(base)*c.scale), 100) }
	// costs runs cases over rounds, and keeps whatever was measured.
	costs := func(ctx context.Context, rounds int, prepare func() ([]benchCase, func(), error)) error {
		cases, done, err := prepare()
		if err != nil {
			return err
		}
		defer done()
		rs, err := alternate(ctx, cases, rounds)
		res.costs = append(res.costs, rs...)
		return err
	}
	if c.scenarios["cost"] {
		mem := backends[0]
		add("cost", fmt.Sprintf("cost: x/time/rate and every algorithm in memory, 1 and 8 goroutines, %d rounds", memoryCostRounds), 3, func(ctx context.Context) error {
			return costs(ctx, memoryCostRounds, func() ([]benchCase, func(), error) {
				return memoryCases(ctx, mem, []int{1, 8}, n(300_000/memoryCostRounds))
			})
		})
		if real != nil {
			redis := backends[len(backends)-1]
			add("cost", fmt.Sprintf("cost: every algorithm on redis, 1 goroutine, %d rounds", redisCostRounds), 4, func(ctx context.Context) error {
				return costs(ctx, redisCostRounds, func() ([]benchCase, func(), error) {
					return redisCases(ctx, redis, algorithms(), 1, n(3_000/redisCostRounds), false)
				})
			})
			peers := c.scenarios["peers"]
			name := fmt.Sprintf("cost: every algorithm on redis, %d goroutines, %d rounds", peerGoroutines, redisCostRounds)
			if peers {
				name += fmt.Sprintf(", beside redis_rate on one key and %s keys", fmtCount(manyKeys))
			}
			add("cost", name, 12, func(ctx context.Context) error {
				return costs(ctx, redisCostRounds, func() ([]benchCase, func(), error) {
					return redisCases(ctx, redis, algorithms(), peerGoroutines, n(6_000), peers)
				})
			})
		}
	} else if c.scenarios["peers"] && real != nil {
		redis := backends[len(backends)-1]
		var bucket []algorithm
		for _, a := range algorithms() {
			if a.name == "tokenbucket" {
				bucket = append(bucket, a)
			}
		}
		add("cost", fmt.Sprintf("redis_rate beside limitkit: one key and %s keys, %d goroutines, %d rounds", fmtCount(manyKeys), peerGoroutines, redisCostRounds), 6, func(ctx context.Context) error {
			return costs(ctx, redisCostRounds, func() ([]benchCase, func(), error) {
				return redisCases(ctx, redis, bucket, peerGoroutines, n(6_000), true)
			})
		})
	}
	if c.scenarios["accuracy"] {
		res.traffics = scenarios(c.duration, c.seed)
		for _, tr := range res.traffics {
			for _, b := range backends {
				for _, a := range algorithms() {
					if !a.rate {
						continue
					}
					add("accuracy", fmt.Sprintf("accuracy: %s, %s on %s", tr.name, a.name, b.name), b.weight(0.01, 0.05), func(ctx context.Context) error {
						r, err := simulate(ctx, b, a, tr, c.duration)
						if err == nil {
							res.accuracy = append(res.accuracy, r)
						}
						return err
					})
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
				add("scale-out", fmt.Sprintf("scale-out: %s on %s", a.name, b.name), b.weight(0.01, 0.05), func(ctx context.Context) error {
					r, err := simulateScaleOut(ctx, b, a, scaleOutFor)
					if err == nil {
						res.scaleOuts = append(res.scaleOuts, r)
					}
					return err
				})
			}
		}
	}
	if c.scenarios["memory"] {
		for _, a := range algorithms() {
			add("memory", fmt.Sprintf("memory: %s in memory, %d rounds", a.name, heapRounds), 0.1, func(ctx context.Context) error {
				f := footprint{algorithm: a.name, backend: "memory", keys: n(100_000)}
				for range heapRounds {
					f.bytes = append(f.bytes, heapPerLimiter(a, f.keys))
				}
				res.memory = append(res.memory, f)
				return nil
			})
		}
		if real != nil {
			for _, a := range algorithms() {
				addr := backends[len(backends)-1].addr
				add("memory", fmt.Sprintf("memory: %s on redis, %d rounds", a.name, redisHeapRounds), 2, func(ctx context.Context) error {
					f := footprint{algorithm: a.name, backend: "redis", keys: n(redisMemoryKeys)}
					for range redisHeapRounds {
						addr, done, err := memoryServer(addr, serverDir)
						if err != nil {
							return err
						}
						v, err := redisPerKey(ctx, addr, a, f.keys)
						done()
						if err != nil {
							return err
						}
						f.bytes = append(f.bytes, v)
					}
					res.memory = append(res.memory, f)
					return nil
				})
			}
		}
	}
	return steps
}

// newClient is the run's go-redis client for addr: room for 64 goroutines'
// calls and the limiters' own (lease renewals, batches) at once, and each
// call bounded by its context's deadline, as the README advises.
func newClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 128, ContextTimeoutEnabled: true})
}

// memoryServer is the address of the server an algorithm's Redis memory
// is measured on: a fresh one in dir, so that every algorithm's keys grow
// the server's dictionaries from the same start, or real when there is no
// dir (-redis).
func memoryServer(real, dir string) (string, func(), error) {
	if dir == "" {
		return real, func() {}, nil
	}
	srv, err := redistest.StartServer(dir)
	if err != nil {
		return "", nil, err
	}
	return srv.Addr, srv.Stop, nil
}

// weight is a step's weight on b: inMemory in memory, remote on Redis,
// twenty times that on miniredis (a Lua interpreter in this process).
func (b *backend) weight(inMemory, remote float64) float64 {
	switch b.name {
	case "memory":
		return inMemory
	case "miniredis":
		return 20 * remote
	}
	return remote
}

func onPath(bin string) bool {
	_, err := exec.LookPath(bin)
	return err == nil
}

// writeHTMLFile writes the HTML report to path.
func writeHTMLFile(path string, res *results) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeHTML(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// redisVersion is the server's redis_version, from INFO server.
func redisVersion(ctx context.Context, c goredis.UniversalClient) (string, error) {
	fields, err := info(ctx, c, "server")
	if err != nil {
		return "", err
	}
	if v := fields["redis_version"]; v != "" {
		return v, nil
	}
	return "", errors.New("no redis_version in INFO server")
}

// cpuModel is the processor's model name where the system says (Linux).
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
