// Package otel records what limitkit's limiters decide as OpenTelemetry
// metrics: requests by result and reason, permits granted and available,
// permits that settlements gave back or charged, waiters queued and their
// time in the queue, concurrency leases held and for how long, and the
// latency and failures of a Redis backend. Every instrument, its unit and its
// attributes are listed in the module's README.
//
// New wraps one ratelimit.Limiter (a memory or redis limiter, a Chain, a
// partitioned limiter's For, a shadow limiter, ...). A Recorder holds the
// instruments of one policy; its Wrap instruments many limiters with them
// (each partition of a partitioned limiter, say), and WrapKeyed a keyed
// limiter such as *partitioned.Limiter, whose own refusals
// (ratelimit.ReasonNoPartition) are then counted too. Shadow runs a limit in
// shadow mode with its decisions recorded; NewPrometheus serves the metrics
// in the Prometheus text format.
//
// Attributes name the policy, the algorithm, the backend and the mode, never
// the key of a partition, whose cardinality is unbounded. They are built once,
// when the Recorder is made, and the counters are kept in the Recorder and
// reported by the OpenTelemetry SDK's collection (asynchronous instruments),
// so that recording a decision of Acquire costs one atomic addition and
// allocates nothing; a Wait answered at once costs the same and one
// allocation (its ctx carries the Recorder's waittrace hooks, through which
// the limiter says which Waits queue). Durations (time in the
// queue, concurrency leases, Redis calls) are histograms, recorded as they
// end.
//
// The package is named otel, as go.opentelemetry.io/otel is: import one of
// them under another name (limitotel, say) in a file that uses both.
package otel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/waittrace"
	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the meter this package records
// with.
const ScopeName = "github.com/limitkit/ratelimit/otel"

// The instruments' names; the README says what each counts.
const (
	RequestsName        = "ratelimit.requests"               // counter, {request}: decisions by result and reason
	PermitsName         = "ratelimit.permits"                // counter, {permit}: permits granted
	QueuedName          = "ratelimit.queued_requests"        // up-down counter, {request}: Wait calls in the queue
	TimeInQueueName     = "ratelimit.request.time_in_queue"  // histogram, s: time Wait calls spent queued
	ActiveLeasesName    = "ratelimit.active_request_leases"  // up-down counter, {lease}: concurrency leases held
	LeaseDurationName   = "ratelimit.request_lease.duration" // histogram, s: how long concurrency leases were held
	BackendDurationName = "ratelimit.backend.duration"       // histogram, s: duration of Redis calls
	BackendFailuresName = "ratelimit.backend.failures"       // counter, {failure}: calls the backend could not answer
	AvailableName       = "ratelimit.available_permits"      // gauge, {permit}: permits available now
	SettledName         = "ratelimit.settled_permits"        // counter, {permit}: permits settlements gave back or charged
)

// The attributes' keys.
const (
	PolicyKey        = attribute.Key("ratelimit.policy")         // WithPolicy; "default" unless set
	AlgorithmKey     = attribute.Key("ratelimit.algorithm")      // tokenbucket, fixedwindow, slidingwindow, slidinglog, concurrency, quota, chain, unknown
	BackendKey       = attribute.Key("ratelimit.backend")        // memory, redis, unknown
	ModeKey          = attribute.Key("ratelimit.mode")           // enforce, or shadow (WithShadow)
	ResultKey        = attribute.Key("ratelimit.result")         // acquired, refused, error
	ReasonKey        = attribute.Key("ratelimit.reason")         // of a refusal: see ReasonName
	ErrorTypeKey     = attribute.Key("error.type")               // of an error: see ErrorType
	FailurePolicyKey = attribute.Key("ratelimit.failure_policy") // Redis only: error, open, closed, fallback
	SettlementKey    = attribute.Key("ratelimit.settlement")     // of ratelimit.settled_permits: returned, charged
)

// Limits of the histograms' buckets, in seconds: from 50µs (a Redis round
// trip on a local network) to 10s.
var durationBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// The outcomes counted apart: a grant, a refusal for each reason, an error
// for each type.
const (
	outGranted  = 0
	outRefused  = 1                     // + reason - 1, for the reasons ReasonLimit..ReasonNoPartition
	nReasons    = 7                     // ReasonLimit..ReasonNoPartition
	outError    = outRefused + nReasons // + error type index
	nOutcomes   = outError + len(errorTypes)
	reasonFirst = ratelimit.ReasonLimit
)

// errorTypes are the values of error.type, in the order ErrorType tests them.
var errorTypes = [...]string{"canceled", "deadline_exceeded", "unavailable", "exceeds_limit", "invalid", "closed", "no_partition", "other"}

// ReasonName is the value of ratelimit.reason for a refusal for r:
// limit, queue_full, evicted, deadline, closed, unavailable, no_partition
// (and "" for ratelimit.ReasonNone).
func ReasonName(r ratelimit.Reason) string {
	switch r {
	case ratelimit.ReasonLimit:
		return "limit"
	case ratelimit.ReasonQueueFull:
		return "queue_full"
	case ratelimit.ReasonEvicted:
		return "evicted"
	case ratelimit.ReasonDeadline:
		return "deadline"
	case ratelimit.ReasonClosed:
		return "closed"
	case ratelimit.ReasonUnavailable:
		return "unavailable"
	case ratelimit.ReasonNoPartition:
		return "no_partition"
	}
	return ""
}

// ErrorType is the value of error.type for an error a limiter returned:
// canceled (context.Canceled), deadline_exceeded (context.DeadlineExceeded,
// unless Redis's), unavailable (redis.ErrUnavailable), exceeds_limit
// (ratelimit.ErrExceedsLimit), invalid (ratelimit.ErrInvalidPermits,
// ErrNilContext, ErrInvalidConfig), closed (ratelimit.ErrClosed),
// no_partition (partitioned.ErrNoPartition), or other.
func ErrorType(err error) string { return errorTypes[errorIndex(err)] }

func errorIndex(err error) int {
	switch {
	case errors.Is(err, redis.ErrUnavailable): // before ctx's: a Redis timeout wraps DeadlineExceeded too
		return 2
	case errors.Is(err, context.Canceled):
		return 0
	case errors.Is(err, context.DeadlineExceeded):
		return 1
	case errors.Is(err, ratelimit.ErrExceedsLimit):
		return 3
	case errors.Is(err, ratelimit.ErrInvalidPermits), errors.Is(err, ratelimit.ErrNilContext), errors.Is(err, ratelimit.ErrInvalidConfig):
		return 4
	case errors.Is(err, ratelimit.ErrClosed):
		return 5
	case errors.Is(err, partitioned.ErrNoPartition):
		return 6
	}
	return 7
}

// Option configures a Recorder (NewRecorder, New, Shadow).
type Option func(*options)

type options struct {
	mp        metric.MeterProvider
	policy    string
	algorithm string
	backend   string
	shadow    bool
	failure   string
	extra     []attribute.KeyValue
	stats     func() ratelimit.Stats // set by New
}

// WithMeterProvider records on mp's meter; the global MeterProvider
// (go.opentelemetry.io/otel.GetMeterProvider) by default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.mp = mp }
}

// WithPolicy names the policy, the value of ratelimit.policy: "default"
// unless set. Keep the names few: each is a series of every instrument.
func WithPolicy(name string) Option { return func(o *options) { o.policy = name } }

// WithConfig sets ratelimit.algorithm from the config the limiters were
// made with (tokenbucket, fixedwindow, slidingwindow, slidinglog,
// concurrency). A concurrency config also makes the wrapped limiters track
// their leases: ratelimit.active_request_leases and
// ratelimit.request_lease.duration.
func WithConfig(cfg ratelimit.Config) Option {
	return func(o *options) { o.algorithm = algorithmOf(cfg) }
}

// WithAlgorithm sets ratelimit.algorithm by name, for a limiter whose
// config WithConfig does not know (one's own). The name "concurrency" tracks
// leases, as WithConfig does.
func WithAlgorithm(name string) Option { return func(o *options) { o.algorithm = name } }

// WithBackend sets ratelimit.backend: "memory", "redis", or a name of one's
// own. With "redis" the calls to the wrapped limiters are timed
// (ratelimit.backend.duration). New finds the backend of a memory or redis
// limiter (or of one of those in shadow mode) itself.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// WithShadow records the decisions under ratelimit.mode "shadow" instead of
// "enforce": for a limiter that a shadow limiter wraps (see Shadow).
func WithShadow() Option { return func(o *options) { o.shadow = true } }

// WithFailurePolicy names the failure policy the Redis limiters were made
// with (redis.WithFailurePolicy), the value of ratelimit.failure_policy on
// the backend instruments: error, open or closed; error by default.
func WithFailurePolicy(p redis.FailurePolicy) Option {
	return func(o *options) {
		switch p {
		case redis.FailOpen:
			o.failure = "open"
		case redis.FailClosed:
			o.failure = "closed"
		default:
			o.failure = "error"
		}
	}
}

// WithFallback says that the Redis limiters were made with redis.WithFallback:
// ratelimit.failure_policy is "fallback".
func WithFallback() Option { return func(o *options) { o.failure = "fallback" } }

// WithAttributes adds constant attributes to every instrument (a service or
// route name, say). Never put a partition key here: each distinct set is a
// series of every instrument.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(o *options) { o.extra = append(o.extra, kv...) }
}

// algorithmOf is the name of cfg's algorithm ("tokenbucket", ...), as
// policies and reports spell it; "unknown" for a config of no algorithm.
func algorithmOf(cfg ratelimit.Config) string {
	if name := algo.Name(cfg); name != "" {
		return name
	}
	return "unknown"
}

// detect fills the algorithm and backend that options left unset from l,
// through its Unwrap chain (see package control): the backend a limiter
// names (its Backend method: memory and redis limiters), and "chain" for a
// Chain (a limiter whose Unwrap returns its members).
func (o *options) detect(l ratelimit.Limiter) {
	if o.backend == "" {
		if b, ok := control.As[interface{ Backend() string }](l); ok {
			o.backend = b.Backend()
		}
	}
	// Stats is cheap in memory only (a Redis limiter's is a round trip).
	if o.backend == "memory" {
		if st, ok := control.As[interface{ Stats() ratelimit.Stats }](l); ok {
			o.stats = st.Stats
		}
	}
	if o.algorithm == "" {
		if _, ok := control.As[interface{ Unwrap() []ratelimit.Limiter }](l); ok {
			o.algorithm = "chain"
		}
	}
}

// Recorder holds the instruments of one policy and the counters behind
// them. Many limiters may record on one Recorder (Wrap, WrapKeyed); the
// counters of two Recorders with the same attributes add up (but for
// ratelimit.available_permits, a gauge: give each limiter New wraps its own
// policy name). It is safe for concurrent use.
type Recorder struct {
	counts   [nOutcomes]atomic.Int64
	permits  atomic.Int64 // permits granted beyond one per grant
	queued   atomic.Int64
	held     atomic.Int64
	failures atomic.Int64
	settled  [2]atomic.Int64 // permits settlements returned, charged
	hooked   atomic.Bool     // CountRedisFailures was called: failures are counted through it only

	timed  bool // time the calls (Redis backend)
	leases bool // track the leases (concurrency)

	// Attribute sets, built once.
	sets       [nOutcomes]attribute.Set // base + result (+ reason or error.type)
	base       attribute.Set
	backendSet attribute.Set    // base (+ failure policy)
	settleSets [2]attribute.Set // base + settlement (returned, charged)

	// Options of the histograms' Record calls, built once, so that
	// recording allocates nothing.
	waitOpts    [3][]metric.RecordOption // by result: acquired, refused, error
	leaseOpts   []metric.RecordOption
	backendOpts [3][]metric.RecordOption

	timeInQueue     metric.Float64Histogram
	leaseDuration   metric.Float64Histogram
	backendDuration metric.Float64Histogram

	requests     metric.Int64ObservableCounter
	permitsObs   metric.Int64ObservableCounter
	queuedObs    metric.Int64ObservableUpDownCounter
	heldObs      metric.Int64ObservableUpDownCounter
	failuresObs  metric.Int64ObservableCounter
	availableObs metric.Int64ObservableGauge
	settledObs   metric.Int64ObservableCounter
	stats        func() ratelimit.Stats // the limiter New wrapped, when it reports Stats in memory
	hooks        *waittrace.Hooks       // the Waits' queue instruments
	registration metric.Registration
	closed       atomic.Bool
}

// NewRecorder makes the instruments of a policy on the meter provider's
// meter (see WithMeterProvider) and registers the callback that reports
// its counters; Close unregisters it. Set the algorithm and the backend with
// options (WithConfig, WithBackend): "unknown" otherwise.
func NewRecorder(opts ...Option) (*Recorder, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return newRecorder(&o)
}

func newRecorder(o *options) (*Recorder, error) {
	if o.mp == nil {
		o.mp = otelapi.GetMeterProvider()
	}
	if o.policy == "" {
		o.policy = "default"
	}
	if o.algorithm == "" {
		o.algorithm = "unknown"
	}
	if o.backend == "" {
		o.backend = "unknown"
	}
	mode := "enforce"
	if o.shadow {
		mode = "shadow"
	}
	r := &Recorder{timed: o.backend == "redis", leases: o.algorithm == "concurrency"}
	r.hooks = &waittrace.Hooks{Queued: r.queuedHook, Dequeued: r.dequeuedHook}
	base := append([]attribute.KeyValue{
		PolicyKey.String(o.policy), AlgorithmKey.String(o.algorithm),
		BackendKey.String(o.backend), ModeKey.String(mode),
	}, o.extra...)
	with := func(kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...)
	}
	r.base = with()
	r.sets[outGranted] = with(ResultKey.String("acquired"))
	for i := range nReasons {
		r.sets[outRefused+i] = with(ResultKey.String("refused"), ReasonKey.String(ReasonName(reasonFirst+ratelimit.Reason(i))))
	}
	for i, t := range errorTypes {
		r.sets[outError+i] = with(ResultKey.String("error"), ErrorTypeKey.String(t))
	}
	r.backendSet = r.base
	if o.backend == "redis" {
		if o.failure == "" {
			o.failure = "error"
		}
		r.backendSet = with(FailurePolicyKey.String(o.failure))
	}
	for i, res := range []string{"acquired", "refused", "error"} {
		r.waitOpts[i] = []metric.RecordOption{metric.WithAttributeSet(with(ResultKey.String(res)))}
		bs := append(r.backendSet.ToSlice(), ResultKey.String(res))
		r.backendOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(bs...))}
	}
	r.leaseOpts = []metric.RecordOption{metric.WithAttributeSet(r.base)}
	r.settleSets = [2]attribute.Set{with(SettlementKey.String("returned")), with(SettlementKey.String("charged"))}

	m := o.mp.Meter(ScopeName)
	var err error
	var errs []error
	keep := func(e error) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	r.requests, err = m.Int64ObservableCounter(RequestsName, metric.WithUnit("{request}"),
		metric.WithDescription("Requests for permits decided, by result (acquired, refused, error) and reason or error type; status checks (0 permits) are not counted."))
	keep(err)
	r.permitsObs, err = m.Int64ObservableCounter(PermitsName, metric.WithUnit("{permit}"),
		metric.WithDescription("Permits granted."))
	keep(err)
	r.queuedObs, err = m.Int64ObservableUpDownCounter(QueuedName, metric.WithUnit("{request}"),
		metric.WithDescription("Wait calls in the queue: requests waiting for permits."))
	keep(err)
	r.heldObs, err = m.Int64ObservableUpDownCounter(ActiveLeasesName, metric.WithUnit("{lease}"),
		metric.WithDescription("Concurrency leases granted and not yet released."))
	keep(err)
	r.settledObs, err = m.Int64ObservableCounter(SettledName, metric.WithUnit("{permit}"),
		metric.WithDescription("Permits that settlements of reservations (control.Settle) gave back (settlement returned: reserved beyond the actual cost) or charged (settlement charged: the actual cost beyond the reservation)."))
	keep(err)
	r.failuresObs, err = m.Int64ObservableCounter(BackendFailuresName, metric.WithUnit("{failure}"),
		metric.WithDescription("Calls the backend could not answer: every failed Redis call with Recorder.CountRedisFailures, else errors wrapping redis.ErrUnavailable and refusals with reason unavailable."))
	keep(err)
	r.timeInQueue, err = m.Float64Histogram(TimeInQueueName, metric.WithUnit("s"),
		metric.WithDescription("Time the Wait calls that queued spent in the queue, from joining it to their answer, by result."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	keep(err)
	r.leaseDuration, err = m.Float64Histogram(LeaseDurationName, metric.WithUnit("s"),
		metric.WithDescription("How long concurrency leases were held, from the grant to the first Release."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	keep(err)
	r.backendDuration, err = m.Float64Histogram(BackendDurationName, metric.WithUnit("s"),
		metric.WithDescription("Duration of calls to a Redis limiter's Acquire, Refund and Settle (one script round trip, or the failure policy's answer), by result."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	keep(err)
	if len(errs) > 0 {
		return nil, fmt.Errorf("otel: making instruments: %w", errors.Join(errs...))
	}
	r.availableObs, err = m.Int64ObservableGauge(AvailableName, metric.WithUnit("{permit}"),
		metric.WithDescription("Permits available now, from Stats, of a memory limiter wrapped by New."))
	if err != nil {
		return nil, fmt.Errorf("otel: making instruments: %w", err)
	}
	r.stats = o.stats
	r.registration, err = m.RegisterCallback(r.observe, r.requests, r.permitsObs, r.queuedObs, r.heldObs, r.failuresObs, r.availableObs, r.settledObs)
	if err != nil {
		return nil, fmt.Errorf("otel: registering the callback: %w", err)
	}
	return r, nil
}

// observe reports the counters; outcomes never seen are left out.
func (r *Recorder) observe(_ context.Context, o metric.Observer) error {
	for i := range r.counts {
		if n := r.counts[i].Load(); n != 0 {
			o.ObserveInt64(r.requests, n, metric.WithAttributeSet(r.sets[i]))
		}
	}
	o.ObserveInt64(r.permitsObs, r.counts[outGranted].Load()+r.permits.Load(), metric.WithAttributeSet(r.base))
	o.ObserveInt64(r.queuedObs, r.queued.Load(), metric.WithAttributeSet(r.base))
	if r.leases {
		o.ObserveInt64(r.heldObs, r.held.Load(), metric.WithAttributeSet(r.base))
	}
	if r.timed || r.failures.Load() != 0 {
		o.ObserveInt64(r.failuresObs, r.failures.Load(), metric.WithAttributeSet(r.backendSet))
	}
	if r.stats != nil {
		o.ObserveInt64(r.availableObs, r.stats().Available, metric.WithAttributeSet(r.base))
	}
	for i := range r.settled {
		if n := r.settled[i].Load(); n != 0 {
			o.ObserveInt64(r.settledObs, n, metric.WithAttributeSet(r.settleSets[i]))
		}
	}
	return nil
}

// settle counts a settlement at actual permits of a reservation of n.
func (r *Recorder) settle(n, actual int) {
	if actual < n {
		r.settled[0].Add(int64(n - actual))
	} else if actual > n {
		r.settled[1].Add(int64(actual - n))
	}
}

// Close unregisters the Recorder's callback: its counters are no longer
// reported. The limiters that record on it may still be used. Safe to call
// twice.
func (r *Recorder) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.registration.Unregister()
}

// record counts the answer of a call for permits.
func (r *Recorder) record(lease ratelimit.Lease, err error, permits int) {
	if err != nil {
		r.recordError(err)
		return
	}
	if permits == 0 { // a status check, which Stats does not count either
		return
	}
	if lease.Acquired() {
		r.counts[outGranted].Add(1)
		if permits != 1 { // the permits counter holds the grants' permits beyond one each
			r.permits.Add(int64(permits - 1))
		}
		return
	}
	reason := lease.Reason()
	if reason < reasonFirst || reason >= reasonFirst+nReasons {
		reason = ratelimit.ReasonLimit
	}
	r.counts[outRefused+int(reason-reasonFirst)].Add(1)
	if reason == ratelimit.ReasonUnavailable && !r.hooked.Load() {
		r.failures.Add(1)
	}
}

func (r *Recorder) recordError(err error) {
	i := errorIndex(err)
	r.counts[outError+i].Add(1)
	if errorTypes[i] == "unavailable" && !r.hooked.Load() {
		r.failures.Add(1)
	}
}

// CountRedisFailures makes r count the backend failures through the
// function it returns, to give redis.WithOnFailure when
// making the Redis limiters that record on r: ratelimit.backend.failures
// then counts every call they could not answer, whatever their failure
// policy, FailOpen grants and the fallback's answers (WithFallback)
// included, which a wrapper cannot tell from Redis's own answers. Without
// it, the failures counted are those the answers show: errors wrapping
// redis.ErrUnavailable and refusals with ratelimit.ReasonUnavailable. Once
// CountRedisFailures is called, r counts failures through the function
// only.
func (r *Recorder) CountRedisFailures() func(error) {
	r.hooked.Store(true)
	return func(error) { r.failures.Add(1) }
}

// resultIndex is 0 for a grant, 1 for a refusal, 2 for an error.
func resultIndex(lease ratelimit.Lease, err error) int { return result(lease.Acquired(), err) }

// result is the index of an answer, granted or not, with err.
func result(granted bool, err error) int {
	switch {
	case err != nil:
		return 2
	case granted:
		return 0
	}
	return 1
}
