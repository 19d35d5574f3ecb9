package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/quota"
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
	name   string           // the report's name, one spelling everywhere
	cfg    ratelimit.Config // what the accuracy and scale-out scenarios run
	fast   ratelimit.Config // cost: cfg's algorithm with limits no decision reaches
	kept   ratelimit.Config // memory per key: a key still held an hour after one grant
	rate   bool             // a rate limit (accuracy scenarios apply)
	period string           // a calendar quota's period ("day"), of a day or more, so neither a rate over seconds (no accuracy or scale-out scenario) nor a concurrency limit; "" for the others
	burst  int              // permits a fresh limiter admits at once on top of its rate (token buckets start full)
	note   string           // what the configuration does, in the report's words
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
		// kept counts per year, not per day: a day's key expires at
		// midnight, which a run may cross before the key is counted; the
		// state is the same whatever the period.
		{name: "quota", period: "day",
			cfg:  quota.Config{Limit: limit, Period: quota.Day},
			fast: quota.Config{Limit: 1 << 50, Period: quota.Day}, kept: quota.Config{Limit: limit, Period: quota.Year},
			note:   "at most 100 per calendar day (UTC); the count starts again at midnight",
			bursts: "2×Limit across a period's end", atMost: "Limit per calendar period"},
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
