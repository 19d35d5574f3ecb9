package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// limit is every rate algorithm's limit: 100 permits per second.
const limit = 100

// bin is the width of the bins the steady scenario's admissions are
// counted in, for its plots and its coefficient of variation: fine enough
// that a refill every 100ms and an even 100/s look different.
const bin = 20 * time.Millisecond

func randSource(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }

// algorithm is one configuration compared, and what the report says of it.
// The report keys everything it knows of an algorithm (its colour, its
// figures) by name.
type algorithm struct {
	name  string           // the report's name, one spelling everywhere
	cfg   ratelimit.Config // what the accuracy and scale-out scenarios run
	fast  ratelimit.Config // cost: cfg's algorithm with limits no decision reaches
	kept  ratelimit.Config // memory per key: a key still held an hour after one grant
	rate  bool             // a rate limit (accuracy scenarios apply)
	burst int              // permits a fresh limiter admits at once on top of its rate (token buckets start full)
	note  string           // what the configuration does, in the report's words
	// What the algorithm lets through, in general (the README's table).
	bursts, atMost string
}

func algorithms() []algorithm {
	return []algorithm{
		{name: "tokenbucket", rate: true, burst: limit,
			cfg:  tokenbucket.Config{Rate: limit, Burst: limit},
			fast: tokenbucket.Config{Rate: 1e9, Burst: 1 << 40}, kept: tokenbucket.Config{Rate: 0.001, Burst: limit},
			note:   "refills 100/s continuously and starts full: its Burst of 100 may go at once, on top of the rate",
			bursts: "up to Burst at once", atMost: "Burst + Rate×t over any t"},
		{name: "tokenbucket-interval", rate: true, burst: limit,
			cfg:  tokenbucket.Config{Period: 100 * time.Millisecond, PerPeriod: limit / 10, Burst: limit},
			fast: tokenbucket.Config{Period: 100 * time.Millisecond, PerPeriod: 1 << 40, Burst: 1 << 40}, kept: tokenbucket.Config{Period: time.Hour, PerPeriod: limit / 10, Burst: limit},
			note:   "adds 10 every 100ms (at multiples of 100ms since the epoch) up to 100, and starts full: its Burst of 100 may go at once",
			bursts: "up to Burst", atMost: "Burst + PerPeriod per refill"},
		{name: "fixedwindow", rate: true,
			cfg:  fixedwindow.Config{Limit: limit, Window: time.Second},
			fast: fixedwindow.Config{Limit: 1 << 40, Window: time.Second}, kept: fixedwindow.Config{Limit: limit, Window: time.Hour},
			note:   "100 per second aligned to the epoch; the count starts again at each edge",
			bursts: "2×Limit across a window edge", atMost: "Limit per aligned window"},
		{name: "slidingwindow-segmented", rate: true,
			cfg:  slidingwindow.Config{Limit: limit, Window: time.Second, Segments: 10},
			fast: slidingwindow.Config{Limit: 1 << 40, Window: time.Second, Segments: 10}, kept: slidingwindow.Config{Limit: limit, Window: time.Hour, Segments: 10},
			note:   "at most 100 in the last ten 100ms segments, the current one included",
			bursts: "2×Limit within a window across a segment edge", atMost: "Limit in any span of Window−Window/Segments, and per segment-aligned window"},
		{name: "slidingwindow-weighted", rate: true,
			cfg:  slidingwindow.Config{Limit: limit, Window: time.Second},
			fast: slidingwindow.Config{Limit: 1 << 40, Window: time.Second}, kept: slidingwindow.Config{Limit: limit, Window: time.Hour},
			note:   "the current aligned second's count plus the previous one's, weighted by their overlap with the last second, stays under 100",
			bursts: "approximate", atMost: "Limit per aligned window"},
		{name: "slidinglog", rate: true,
			cfg:  slidinglog.Config{Limit: limit, Window: time.Second},
			fast: slidinglog.Config{Limit: 1 << 40, Window: 10 * time.Millisecond}, kept: slidinglog.Config{Limit: limit, Window: time.Hour},
			note:   "one entry per grant: at most 100 in any 1s",
			bursts: "none", atMost: "Limit in any window"},
		{name: "concurrency",
			cfg:  concurrency.Config{Limit: limit},
			fast: concurrency.Config{Limit: 1 << 40}, kept: concurrency.Config{Limit: limit},
			note:   "at most 100 held at once; Release gives them back",
			bursts: "—", atMost: "Limit held at once"},
	}
}

// describe is cfg as Go source writes it, zero fields left out:
// tokenbucket.Config{Rate: 100, Burst: 100}. It reads any config struct
// the same way, so the report states exactly what ran.
func describe(cfg ratelimit.Config) string {
	v := reflect.Indirect(reflect.ValueOf(cfg))
	if v.Kind() != reflect.Struct {
		return fmt.Sprintf("%T(%v)", cfg, cfg)
	}
	var fields []string
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() || f.IsZero() {
			continue
		}
		fields = append(fields, fmt.Sprintf("%s: %v", sf.Name, f.Interface()))
	}
	return fmt.Sprintf("%s{%s}", v.Type(), strings.Join(fields, ", "))
}

// backend builds limiters; clock, when set, pins their time. On Redis a
// limiter gets a key of its own, or key when given (replicas sharing one
// limit).
type backend struct {
	name   string
	client goredis.UniversalClient // nil for memory
	addr   string                  // the server's, for clients of a step's own (real Redis only)
	seq    int
}

func (b *backend) build(cfg ratelimit.Config, clock ratelimit.Clock, key string) (ratelimit.Limiter, func(), error) {
	if b.client == nil {
		var opts []memory.Option
		if clock != nil {
			opts = append(opts, memory.WithClock(clock))
		}
		l, err := memory.New(cfg, opts...)
		if err != nil {
			return nil, nil, err
		}
		return l, func() { l.Close() }, nil
	}
	b.seq++
	// The step's deadline bounds the calls, not the library's 1s default:
	// a call slowed by a loaded machine must not fail a step.
	opts := []redis.Option{redis.WithTimeout(stepTimeout)}
	if clock != nil {
		opts = append(opts, redis.WithClock(clock))
	}
	if key == "" {
		key = fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), b.seq)
	}
	l, err := redis.New(b.client, key, cfg, opts...)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}

// --- accuracy -------------------------------------------------------------

// traffic is a scenario's arrival instants, offsets from the start, in
// whole microseconds: Redis's clock has no finer parts, so memory and Redis
// are offered the same instants and can decide the same.
type traffic struct {
	name    string
	title   string // what it tests, as a heading says it
	offered string // the load offered, in full
	// chart is how its plots show admissions: "bins", admitted per bin;
	// "window", admitted in the last second at every instant.
	chart    string
	arrivals []time.Duration
}

// binned counts instants per bin over d.
func binned(ts []time.Duration, d time.Duration) []int {
	bins := make([]int, int(d/bin))
	for _, t := range ts {
		if i := int(t / bin); i < len(bins) {
			bins[i]++
		}
	}
	return bins
}

// The scenarios' shapes.
const (
	steadyEvery   = 5 * time.Millisecond   // steady: 200/s, twice the limit
	edgeSpacing   = 100 * time.Microsecond // boundary: the limit in 10ms on each side of an edge
	background    = 50 * time.Millisecond  // bursty: one every 50ms, 20/s
	burstSize     = limit * 3 / 2          // bursty: 150 at once
	burstSpan     = 50 * time.Millisecond  // in 50ms
	burstsLandBy  = 900 * time.Millisecond // at a random moment in a second's first 900ms
	burstDuration = 50 * time.Millisecond  // the span the burst intake is counted over
)

// scenarios is the traffics of the accuracy scenarios over d; seed places
// the bursts.
func scenarios(d time.Duration, seed int64) []traffic {
	rng := randSource(seed)
	var steady, boundary, bursty []time.Duration
	for t := time.Duration(0); t < d; t += steadyEvery {
		steady = append(steady, t)
	}
	edges := 0
	for k := time.Second; k < d; k += time.Second { // L just before each window edge, L just after
		edges++
		for i := 0; i < limit; i++ {
			boundary = append(boundary, k-limit*edgeSpacing+time.Duration(i)*edgeSpacing)
		}
		for i := 0; i < limit; i++ {
			boundary = append(boundary, k+time.Duration(i)*edgeSpacing)
		}
	}
	for t := time.Duration(0); t < d; t += background {
		bursty = append(bursty, t)
	}
	for k := time.Duration(0); k < d; k += time.Second { // a burst at a random moment each second
		at := k + time.Duration(rng.Int63n(int64(burstsLandBy)))
		for i := 0; i < burstSize; i++ {
			bursty = append(bursty, (at + time.Duration(i)*burstSpan/burstSize).Truncate(time.Microsecond))
		}
	}
	sort.Slice(bursty, func(i, j int) bool { return bursty[i] < bursty[j] })
	return []traffic{
		{name: "steady", title: "steady overload", chart: "bins", arrivals: steady,
			offered: fmt.Sprintf("one request every %v for %v: %d/s, twice the limit (%s requests).",
				steadyEvery, d, int(time.Second/steadyEvery), fmtCount(float64(len(steady))))},
		{name: "boundary", title: "a burst on each side of a window edge", chart: "window", arrivals: boundary,
			offered: fmt.Sprintf("the limit (%d requests) in the %v before each second's edge and %d more in the %v after it, one every %v, at the %d edges of %v (%s requests); nothing in between.",
				limit, limit*edgeSpacing, limit, limit*edgeSpacing, edgeSpacing, edges, d, fmtCount(float64(len(boundary))))},
		{name: "bursty", title: "bursts at random moments", chart: "window", arrivals: bursty,
			offered: fmt.Sprintf("a background of one request every %v (%d/s) and, in each second, a burst of %d requests within %v that lands at a random moment of the second's first %v (seed %d: the same moments every run; -seed changes them); %s requests over %v.",
				background, int(time.Second/background), burstSize, burstSpan, burstsLandBy, seed, fmtCount(float64(len(bursty))), d)},
	}
}

// accuracy is one algorithm's outcome on one traffic on one backend.
type accuracy struct {
	traffic, algorithm, backend string
	admitted                    int
	maxWindow                   int     // most admitted in any 1s window
	maxAligned                  int     // most admitted in a second aligned to the epoch
	full, wanted                int     // aligned seconds admitted the full limit, of those offered it
	maxBurst                    int     // most admitted in any burstDuration
	cv                          float64 // coefficient of variation of admitted per bin
	grants                      []time.Duration
	granted                     []bool // the decision on each arrival
}

// simulate offers the arrivals to a limiter on a fake clock, which starts
// on a whole second, as windows aligned to the epoch are.
func simulate(ctx context.Context, b *backend, a algorithm, tr traffic, d time.Duration) (accuracy, error) {
	clock := ratelimittest.NewClock()
	l, closeFn, err := b.build(a.cfg, clock, "")
	if err != nil {
		return accuracy{}, err
	}
	defer closeFn()
	start := clock.Now()
	var grants []time.Duration
	granted := make([]bool, len(tr.arrivals))
	for i, at := range tr.arrivals {
		clock.Set(start.Add(at))
		lease, err := l.Acquire(ctx, 1)
		if err != nil {
			return accuracy{}, err
		}
		if granted[i] = lease.Acquired(); granted[i] {
			grants = append(grants, at)
		}
	}
	r := accuracy{traffic: tr.name, algorithm: a.name, backend: b.name, admitted: len(grants), grants: grants, granted: granted,
		maxWindow: maxInWindow(grants, time.Second), maxBurst: maxInWindow(grants, burstDuration), cv: variation(binned(grants, d))}
	offered, admitted := perSecond(tr.arrivals, d), perSecond(grants, d)
	for i := range admitted {
		r.maxAligned = max(r.maxAligned, admitted[i])
		if offered[i] >= limit {
			r.wanted++
			if admitted[i] >= limit {
				r.full++
			}
		}
	}
	return r, nil
}

// perSecond counts instants per second of d, the seconds aligned to the
// start (and so to the epoch).
func perSecond(ts []time.Duration, d time.Duration) []int {
	n := make([]int, int((d+time.Second-1)/time.Second))
	for _, t := range ts {
		if i := int(t / time.Second); i < len(n) {
			n[i]++
		}
	}
	return n
}

// maxInWindow is the most instants in any window (t-w, t].
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// trailing is, for each of cols equal columns of [from, to), the most of
// the sorted instants ts in any window (t-w, t] with t in the column: the
// count a plot of "in the last w" draws, with every peak kept whatever
// the column's width.
func trailing(ts []time.Duration, w, from, to time.Duration, cols int) []int {
	type event struct {
		t time.Duration
		d int
	}
	evs := make([]event, 0, 2*len(ts))
	for _, t := range ts {
		evs = append(evs, event{t, 1}, event{t + w, -1})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].t < evs[j].t })
	out := make([]int, cols)
	col := func(t time.Duration) int { return min(int(int64(cols)*int64(t-from)/int64(to-from)), cols-1) }
	count, i := 0, 0
	for ; i < len(evs) && evs[i].t <= from; i++ {
		count += evs[i].d
	}
	cur := 0
	out[0] = count
	for i < len(evs) && evs[i].t < to {
		t, before := evs[i].t, count
		for ; i < len(evs) && evs[i].t == t; i++ {
			count += evs[i].d
		}
		c := col(t)
		for cur < c {
			cur++
			out[cur] = before
		}
		out[c] = max(out[c], count)
	}
	for cur < cols-1 {
		cur++
		out[cur] = count
	}
	return out
}

func variation(bins []int) float64 {
	var sum, sq float64
	for _, b := range bins {
		sum += float64(b)
	}
	mean := sum / float64(len(bins))
	for _, b := range bins {
		sq += (float64(b) - mean) * (float64(b) - mean)
	}
	if mean == 0 {
		return 0
	}
	return math.Sqrt(sq/float64(len(bins))) / mean
}

// --- scale-out ------------------------------------------------------------

// scaleOutFor is how long the scale-out scenario offers its load.
const scaleOutFor = 5 * time.Second

// scaleOut: three replicas each offered 2x the limit for scaleOutFor.
// Memory: each has its own limiter; Redis: they share one key.
type scaleOut struct {
	algorithm, backend string
	perSecond          float64
	// allowed is what one limit of the configuration admits per second
	// over the run: the rate, and a starting burst spread over the run.
	allowed float64
}

func simulateScaleOut(ctx context.Context, b *backend, a algorithm, d time.Duration) (scaleOut, error) {
	clock := ratelimittest.NewClock()
	var ls []ratelimit.Limiter
	key := "" // in memory: a limiter each
	if b.client != nil {
		key = fmt.Sprintf("bench-scaleout-%d", time.Now().UnixNano()) // on Redis: three limiters, one key
	}
	for i := 0; i < 3; i++ {
		l, closeFn, err := b.build(a.cfg, clock, key)
		if err != nil {
			return scaleOut{}, err
		}
		defer closeFn()
		ls = append(ls, l)
	}
	start := clock.Now()
	admitted := 0
	for t := time.Duration(0); t < d; t += steadyEvery {
		clock.Set(start.Add(t))
		for _, l := range ls {
			if lease, err := l.Acquire(ctx, 1); err != nil {
				return scaleOut{}, err
			} else if lease.Acquired() {
				admitted++
			}
		}
	}
	return scaleOut{algorithm: a.name, backend: b.name, perSecond: float64(admitted) / d.Seconds(),
		allowed: limit + float64(a.burst)/d.Seconds()}, nil
}

// --- cost -----------------------------------------------------------------

// spread is one figure measured in rounds: a value per round.
type spread []float64

// median is the rounds' median (of the middle two when even); 0 for none.
func (s spread) median() float64 {
	if len(s) == 0 {
		return 0
	}
	return median(slices.Clone(s))
}

func (s spread) lo() float64 { return slices.Min(s) }
func (s spread) hi() float64 { return slices.Max(s) }

// below reports whether every round of s is under every round of t: a
// difference beyond the run-to-run spread. Rankings rest on nothing else.
func (s spread) below(t spread) bool { return len(s) > 0 && len(t) > 0 && s.hi() < t.lo() }

// width is the spread's range relative to its median.
func (s spread) width() float64 {
	if len(s) == 0 || s.median() == 0 {
		return 0
	}
	return (s.hi() - s.lo()) / s.median()
}

// cost is one case measured in rounds.
type cost struct {
	algorithm, backend string
	goroutines         int
	keys               int    // Redis keys the decisions spread over (0 in memory)
	ns                 spread // ns per decision, a value per round
	perSecond          spread // decisions per second, a value per round
	allocsPerOp        float64
	bytesPerOp         float64       // heap bytes allocated per call, the harness's included
	p50, p99           time.Duration // medians of the rounds'; zero when the calls were not timed one by one
}

// round is one round of a case.
type round struct {
	ns, perSecond, allocsPerOp, bytesPerOp float64
	p50, p99                               time.Duration
}

// measure runs op n times on g goroutines and times each call, for the
// latency percentiles. The timing (two clock reads and an append, tens of
// nanoseconds) is inside ns and perSecond: nothing beside a Redis round
// trip, too much beside an in-memory decision, which throughput measures.
func measure(g, n int, op func() error) (round, error) { return measureOps(g, n, true, op) }

// throughput runs op n times on g goroutines with no clock read between
// the calls: ns and perSecond are the calls' own, and there are no
// percentiles.
func throughput(g, n int, op func() error) (round, error) { return measureOps(g, n, false, op) }

func measureOps(g, n int, timed bool, op func() error) (round, error) {
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	lat := make([][]time.Duration, g)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if !timed {
				for k := i; k < n; k += g {
					if err := op(); err != nil {
						once.Do(func() { firstErr = err })
						return
					}
				}
				return
			}
			mine := make([]time.Duration, 0, n/g+1)
			for k := i; k < n; k += g {
				t0 := time.Now()
				if err := op(); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat[i] = mine
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	// The harness's own allocations: a goroutine's closure each, and when
	// timed its slice of latencies.
	harnessAllocs := int64(g)
	if timed {
		harnessAllocs += int64(g)
	}
	r := round{ns: float64(elapsed.Nanoseconds()) / float64(n),
		allocsPerOp: float64(int64(ms1.Mallocs-ms0.Mallocs)-harnessAllocs) / float64(n),
		bytesPerOp:  float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(n), perSecond: float64(n) / elapsed.Seconds()}
	r.p50, r.p99 = percentiles(all)
	return r, firstErr
}

// percentiles sorts the latencies d and returns their 50th and 99th
// percentiles; zero for none.
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100]
}

// benchCase is one case of an alternated measurement: op called calls
// times a round on goroutines goroutines, each call timed when timed.
type benchCase struct {
	algorithm, backend string
	goroutines, keys   int
	calls              int
	timed              bool
	op                 func() error
}

// alternate measures the cases in rounds, the cases taking turns (each
// going first in turn) so that all of them see the same machine, busy or
// not; a case's figures are its rounds, and the medians of its rounds. A
// case that fails is left out and named in the error; the others go on.
func alternate(ctx context.Context, cases []benchCase, rounds int) ([]cost, error) {
	runs := make([][]round, len(cases))
	failed := make([]error, len(cases))
	for r := 0; r < rounds; r++ {
		for k := range cases {
			i := (r + k) % len(cases)
			if failed[i] != nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			c := cases[i]
			rd, err := measureOps(c.goroutines, c.calls, c.timed, c.op)
			if err != nil {
				failed[i] = fmt.Errorf("%s on %s, %s: %w", c.algorithm, c.backend, goroutines(c.goroutines), err)
				continue
			}
			runs[i] = append(runs[i], rd)
		}
	}
	var out []cost
	for i, c := range cases {
		if failed[i] != nil {
			continue
		}
		pick := func(f func(r round) float64) spread {
			v := make(spread, len(runs[i]))
			for j, r := range runs[i] {
				v[j] = f(r)
			}
			return v
		}
		out = append(out, cost{algorithm: c.algorithm, backend: c.backend, goroutines: c.goroutines, keys: c.keys,
			ns:          pick(func(r round) float64 { return r.ns }),
			perSecond:   pick(func(r round) float64 { return r.perSecond }),
			allocsPerOp: pick(func(r round) float64 { return r.allocsPerOp }).median(),
			bytesPerOp:  pick(func(r round) float64 { return r.bytesPerOp }).median(),
			p50:         time.Duration(pick(func(r round) float64 { return float64(r.p50) }).median()),
			p99:         time.Duration(pick(func(r round) float64 { return float64(r.p99) }).median())})
	}
	return out, errors.Join(failed...)
}

// goroutines is "1 goroutine", "8 goroutines".
func goroutines(g int) string {
	if g == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", g)
}

// decide is the op of a cost case: Acquire (and Release) on l.
func decide(ctx context.Context, l ratelimit.Limiter) func() error {
	return func() error {
		lease, err := l.Acquire(ctx, 1)
		lease.Release()
		return err
	}
}

// xrateName is the reference's name in the reports.
const xrateName = "x/time/rate"

// memoryCases is the cost cases in memory: x/time/rate's AllowN(time.Now(),
// 1), the clock read included as limitkit's decisions include theirs, and
// every algorithm's Acquire (and Release) with limits no decision reaches,
// at each of gs goroutines, calls calls a round. done closes the limiters.
func memoryCases(ctx context.Context, b *backend, gs []int, calls int) (cases []benchCase, done func(), err error) {
	var closers []func()
	done = func() {
		for _, c := range closers {
			c()
		}
	}
	x := rate.NewLimiter(1e9, 1<<40)
	for _, g := range gs {
		cases = append(cases, benchCase{algorithm: xrateName, backend: "memory", goroutines: g, calls: calls,
			op: func() error { x.AllowN(time.Now(), 1); return nil }})
	}
	for _, a := range algorithms() {
		l, closeFn, err := b.build(a.fast, nil, "")
		if err != nil {
			done()
			return nil, nil, fmt.Errorf("%s: %w", a.name, err)
		}
		closers = append(closers, closeFn)
		for _, g := range gs {
			cases = append(cases, benchCase{algorithm: a.name, backend: "memory", goroutines: g, calls: calls, op: decide(ctx, l)})
		}
	}
	return cases, done, nil
}

// --- limitkit beside go-redis/redis_rate ----------------------------------

const (
	// manyKeys is how many keys the many-keys comparison spreads over.
	manyKeys = 10_000
	// peerName is go-redis/redis_rate in the reports.
	peerName = "redis_rate"
	// peerGoroutines is the goroutines of the Redis comparison.
	peerGoroutines = 64
)

// peerLimit is redis_rate's limit in the comparison: a burst no decision
// reaches, as limitkit's fast token bucket.
var peerLimit = redis_rate.Limit{Rate: 1000, Burst: 1e9, Period: time.Second}

// redisCases is the cases on Redis at g goroutines on one client, calls
// calls a round, each call timed: each of algs on a key of its own; with
// peers, go-redis/redis_rate on one key too, and limitkit's token bucket
// (its fast config) and redis_rate over manyKeys keys (one limiter per key,
// made by one Factory; redis_rate's limiter takes the key per call, every
// key in turn). Neither token bucket's state ever fills, so both scripts do
// the same work: read the state and the time, write the state. done closes
// the limiters and removes the many keys.
func redisCases(ctx context.Context, b *backend, algs []algorithm, g, calls int, peers bool) (cases []benchCase, done func(), err error) {
	var closers []func()
	done = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for _, a := range algs {
		l, closeFn, err := b.build(a.fast, nil, "")
		if err != nil {
			done()
			return nil, nil, fmt.Errorf("%s: %w", a.name, err)
		}
		closers = append(closers, closeFn)
		cases = append(cases, benchCase{algorithm: a.name, backend: b.name, goroutines: g, keys: 1, calls: calls, timed: true, op: decide(ctx, l)})
	}
	if !peers {
		return cases, done, nil
	}
	client, ok := b.client.(*goredis.Client)
	if !ok {
		done()
		return nil, nil, errors.New("the redis_rate comparison needs a *goredis.Client")
	}
	prefix := fmt.Sprintf("bench%x-", time.Now().UnixNano()%0xffffff)
	closers = append(closers, func() { unlinkMatching(context.Background(), client, "*"+prefix+"*") })
	names := make([]string, manyKeys)
	for i := range names {
		names[i] = fmt.Sprintf("%suser-%d", prefix, i)
	}
	var fast ratelimit.Config
	for _, a := range algorithms() {
		if a.name == "tokenbucket" {
			fast = a.fast
		}
	}
	f, err := redis.NewFactory(client, fast, redis.WithTimeout(stepTimeout))
	if err != nil {
		done()
		return nil, nil, err
	}
	limiters := make([]*redis.Limiter, manyKeys)
	closers = append(closers, func() {
		for _, l := range limiters {
			if l != nil {
				l.Close()
			}
		}
	})
	for i := range limiters {
		if limiters[i], err = f.New(names[i]); err != nil {
			done()
			return nil, nil, err
		}
	}
	theirs := redis_rate.NewLimiter(client)
	one := fmt.Sprintf("bench%x-one", time.Now().UnixNano()%0xffffff)
	var next atomic.Uint64
	key := func() int { return int(next.Add(1) * 7919 % manyKeys) } // every key in turn, spread
	cases = append(cases,
		benchCase{algorithm: peerName, backend: b.name, goroutines: g, keys: 1, calls: calls, timed: true,
			op: func() error { _, err := theirs.Allow(ctx, one, peerLimit); return err }},
		benchCase{algorithm: "tokenbucket", backend: b.name, goroutines: g, keys: manyKeys, calls: calls, timed: true,
			op: func() error { _, err := limiters[key()].Acquire(ctx, 1); return err }},
		benchCase{algorithm: peerName, backend: b.name, goroutines: g, keys: manyKeys, calls: calls, timed: true,
			op: func() error { _, err := theirs.Allow(ctx, names[key()], peerLimit); return err }})
	closers = append(closers, func() { client.Unlink(context.Background(), "rate:"+one) })
	return cases, done, nil
}

// median is the median of v (of the middle two when even), sorting v.
func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// unlinkMatching removes the keys matching pattern, a page at a time.
func unlinkMatching(ctx context.Context, client *goredis.Client, pattern string) error {
	for cursor := uint64(0); ; {
		keys, next, err := client.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			client.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// --- memory per key ---------------------------------------------------------

// footprint is the memory per key of an algorithm on a backend, measured
// in rounds.
type footprint struct {
	algorithm, backend string
	keys               int    // how many each round's figure was taken over
	bytes              spread // bytes per key, a value per round
}

// heapPerLimiter is the heap held per in-memory limiter after one grant,
// over n limiters made by one memory.Factory, as a partitioned limiter's are.
func heapPerLimiter(a algorithm, n int) float64 {
	var ms0, ms1 runtime.MemStats
	ls := make([]memory.Limiter, n)
	f, _ := memory.NewFactory(a.cfg)
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := range ls {
		ls[i] = f.New()
		ls[i].Acquire(context.Background(), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	per := float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(n)
	runtime.KeepAlive(ls)
	return per
}

// redisMemoryKeys is how many keys redisPerKey makes in a round: enough
// that the server's per-key overheads (its dictionaries' slots) are in the
// figure, at the load of the peer benchmark's 50,000 keys
// (BenchmarkRedisMemoryPerKey): 25,000 keys fill a dictionary of 32,768
// slots as 50,000 fill one of 65,536.
const redisMemoryKeys = 25_000

// The rounds of each measurement: the cost cases alternate over theirs, so
// that the run-to-run spread is measured, not guessed.
const (
	memoryCostRounds = 5 // in memory
	redisCostRounds  = 3 // on Redis
	heapRounds       = 3 // memory per key in memory
	redisHeapRounds  = 2 // memory per key on Redis, a server started for each round
)

// dataMemory is the server's used_memory less what its clients' buffers
// hold (mem_clients_normal), which grow and shrink with the connections'
// traffic rather than with the keys.
func dataMemory(ctx context.Context, client *goredis.Client) (int64, error) {
	m, err := info(ctx, client, "memory")
	if err != nil {
		return 0, err
	}
	used, err1 := strconv.ParseInt(m["used_memory"], 10, 64)
	clients, err2 := strconv.ParseInt(m["mem_clients_normal"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	return used - clients, nil
}

// info is the fields of one section of the server's INFO.
func info(ctx context.Context, client goredis.UniversalClient, section string) (map[string]string, error) {
	text, err := client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// redisPerKey is the growth of the server's used_memory per key over n
// keys of 17 bytes before the algorithm's suffix, one grant each. The keys
// are made on 64 goroutines through a client of their own; the memory is
// read on a connection of its own, before the keys are made and once that
// client's connections are closed, less what the connections' buffers hold
// (mem_clients_normal). Buffers grow and shrink with the traffic, not with
// the keys: read beside 64 busy connections the figure moved by tens of
// bytes per key from round to round, read this way by a byte or two. The
// keys are removed afterwards.
func redisPerKey(ctx context.Context, addr string, a algorithm, n int) (float64, error) {
	meas := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1, ContextTimeoutEnabled: true})
	defer meas.Close()
	before, err := dataMemory(ctx, meas)
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("b%x:", time.Now().UnixNano()%0xfff)
	defer unlinkMatching(context.WithoutCancel(ctx), meas, prefix+"*")
	work := newClient(addr)
	ls := make([]*redis.Limiter, n)
	// closeAll closes the limiters once their client is closed, so that
	// no release writes a key again.
	closeAll := sync.OnceFunc(func() {
		work.Close()
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	})
	defer closeAll()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := g; k < n; k += 64 {
				l, err := redis.New(work, fmt.Sprintf("k%011d", k), a.kept, redis.WithPrefix(prefix), redis.WithTimeout(stepTimeout))
				if err == nil {
					ls[k] = l
					_, err = l.Acquire(ctx, 1)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	work.Close()
	after, err := dataMemory(ctx, meas)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}
