package envoy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/policy"
)

// Options configures NewService.
type Options struct {
	// Source is the configuration; required.
	Source *Source
	// Backend makes the limiters of the rules and of the requests' limit
	// overrides (policy.Memory() when nil; policy.Redis for a fleet).
	Backend policy.Backend
	// Policies is the registry of the server's policy store, which decides
	// the descriptors whose rule names a policy; nil: such a descriptor
	// fails (see FailureMode).
	Policies *policy.Registry
	// StopCountingOverLimit, as envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when a descriptor of a call
	// is over its limit, the hits of the descriptors within theirs are
	// given back. By default they are counted, and so are refused hits.
	StopCountingOverLimit bool
	// MaxOverrides bounds the limits that requests' overrides may create
	// (one per unit and requests per unit), for the service's life: a
	// call with an override beyond them is answered ResourceExhausted.
	// Zero means 256.
	MaxOverrides int
	// LocalCacheSize, when positive, is as envoyproxy/ratelimit's
	// LOCAL_CACHE_SIZE_IN_BYTES, in entries: at most that many counters of
	// fixed windows (rules and overrides, not shadow_mode rules) known to
	// be past their limit are remembered, and a call on one is answered
	// OVER_LIMIT without asking the backend (nor counting its hits, nor
	// telling its metrics) until its window ends by Now. When it is full, a
	// counter whose window has ended goes (among the first few learnt), or
	// else the counter learnt first. A change of the configuration empties
	// it.
	LocalCacheSize int
	// Now is the clock of the response's figures that the limiter does not
	// give, and of the local over-limit cache; time.Now when nil.
	Now func() time.Time
	// OnError, if set, receives the registry's reload errors, and the
	// errors of giving back hits that a call counted and must not keep
	// (StopCountingOverLimit's, and those a fixed window's fill took in the
	// next window): they stay counted, which errs on the side of refusing.
	OnError func(error)
}

// Service answers ShouldRateLimit; it is a rlspb.RateLimitServiceServer,
// safe for concurrent use. Close it when done.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	src   *Source
	rules *policy.Registry
	opts  Options

	over *overCache // nil without Options.LocalCacheSize

	mu        sync.Mutex
	overrides map[[2]uint32]*overrideLimit
	closed    bool
}

// NewService makes the limiters of opts.Source's rules (a policy.Registry
// over it, with opts.Backend) and returns the service.
func NewService(ctx context.Context, opts Options) (*Service, error) {
	if opts.Source == nil {
		return nil, errors.New("envoy: Options.Source is required")
	}
	if opts.Backend == nil {
		opts.Backend = policy.Memory()
	}
	if opts.MaxOverrides <= 0 {
		opts.MaxOverrides = 256
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	reg, err := policy.NewRegistry(ctx, opts.Source, policy.Options{Backend: opts.Backend, OnError: opts.OnError})
	if err != nil {
		return nil, err
	}
	s := &Service{src: opts.Source, rules: reg, opts: opts, overrides: map[[2]uint32]*overrideLimit{}}
	if opts.LocalCacheSize > 0 {
		s.over = newOverCache(opts.LocalCacheSize)
	}
	return s, nil
}

// Rules is the registry of the rules' fixed windows (policies named by
// Rule.PolicyName, keyed by the descriptor's counter key), each counting
// one permit more than its rule's requests_per_unit (see the package doc).
func (s *Service) Rules() *policy.Registry { return s.rules }

// Close closes the rules' and the overrides' limiters. Safe to call twice.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ovs := s.overrides
	s.overrides = nil
	s.mu.Unlock()
	errs := []error{s.rules.Close()}
	for _, o := range ovs {
		errs = append(errs, o.close())
	}
	return errors.Join(errs...)
}

// decision is one descriptor's answer, and what made it.
type decision struct {
	rule      *Rule
	key       string
	hits      uint64
	override  *overrideLimit
	unlimited bool

	lease  ratelimit.Lease
	cfg    ratelimit.Config // the limiter's configuration, for the headers
	name   string           // the policy's name, for the headers
	over   bool             // over its limit (shadow mode or not)
	status *rlspb.RateLimitResponse_DescriptorStatus
	refund func() error // gives the descriptor's hits back
}

// ShouldRateLimit decides a request as envoyproxy/ratelimit does (see the
// package doc), on limitkit's limiters.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	cfg := s.src.Config()
	if cfg == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	ds := make([]decision, len(req.Descriptors))
	replacing := map[string]bool{}
	known := cfg.Has(req.Domain)
	for i, d := range req.Descriptors {
		dd := &ds[i]
		dd.hits = uint64(max(1, req.HitsAddend))
		if h := d.GetHitsAddend(); h != nil {
			dd.hits = h.GetValue() // 0: a check that counts nothing
		}
		if known && d.GetLimit() != nil {
			o, err := s.override(d.GetLimit())
			if err != nil {
				return nil, err
			}
			dd.override, dd.key = o, overrideKey(req.Domain, d.Entries)
			continue
		}
		dd.rule, dd.key = cfg.Match(req.Domain, entries(d.Entries))
		if dd.rule == nil {
			continue
		}
		for _, r := range dd.rule.Replaces {
			replacing[r] = true
		}
		if dd.rule.Unlimited {
			dd.unlimited, dd.rule = true, nil
		}
	}
	for i := range ds {
		if r := ds[i].rule; r != nil && r.Name != "" && replacing[r.Name] {
			ds[i].rule = nil
		}
	}

	now := s.opts.Now()
	anyOver := false
	for i := range ds {
		if err := s.decide(ctx, cfg, &ds[i], now); err != nil {
			return nil, err
		}
		anyOver = anyOver || ds[i].over
	}
	if s.opts.StopCountingOverLimit && anyOver {
		for i := range ds {
			if d := &ds[i]; d.refund != nil && !d.over {
				if d.refund() != nil {
					continue // the hits stay counted (OnError was told): the status says so
				}
				// What is left now that the hits are given back.
				if l := d.status.CurrentLimit; l != nil {
					d.status.LimitRemaining = uint32(min(uint64(d.status.LimitRemaining)+d.hits, uint64(l.RequestsPerUnit)))
				}
			}
		}
	}
	return s.respond(ds, now), nil
}

func entries(es []*rlcommon.RateLimitDescriptor_Entry) []Entry {
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = Entry{e.GetKey(), e.GetValue()}
	}
	return out
}

// permits is hits as a number of permits (a number no limit holds when it
// does not fit).
func permits(hits uint64) int {
	if hits > uint64(check.MaxLimit) {
		return int(check.MaxLimit) + 1
	}
	return int(hits)
}

// decide asks d's limiter, and sets d's status.
func (s *Service) decide(ctx context.Context, cfg *Config, d *decision, now time.Time) error {
	switch {
	case d.unlimited:
		d.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		return nil
	case d.rule == nil && d.override == nil:
		d.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		return nil
	}
	var limit *rlspb.RateLimitResponse_RateLimit
	var acquire func(n int) (ratelimit.Lease, error)
	var refund func(ratelimit.Lease, int) error
	fixed := true // a window of envoyproxy/ratelimit's: refused hits count
	mode, shadow := FailError, false
	switch {
	case d.override != nil:
		o := d.override
		limit = &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: o.rpu, Unit: o.unit}
		d.cfg, d.name = o.cfg, o.name
		if o.reg != nil {
			acquire = func(n int) (ratelimit.Lease, error) { return o.keyed.Acquire(ctx, d.key, n) }
			refund = func(l ratelimit.Lease, n int) error { return s.giveBack(ctx, o.keyed, d, l, n) }
		}
	case d.rule.Policy != "":
		r := d.rule
		mode, shadow, fixed, d.name = r.FailureMode, r.ShadowMode, false, r.Policy
		if s.opts.Policies == nil {
			return s.failed(ctx, d, mode, fmt.Errorf("descriptor %s names policy %q, and the server has no policy store", r.Path, r.Policy))
		}
		p, ok := s.opts.Policies.Policy(r.Policy)
		if !ok {
			return s.failed(ctx, d, mode, fmt.Errorf("%w: %q (named by %s)", policy.ErrUnknownPolicy, r.Policy, r.Path))
		}
		if p.Algorithm() == policy.Concurrency {
			return s.failed(ctx, d, mode, fmt.Errorf("policy %q is a concurrency limit: Envoy's protocol has no release, so it cannot be applied", r.Policy))
		}
		d.cfg = p.Config
		keyed := s.opts.Policies.Keyed(r.Policy, App)
		acquire = func(n int) (ratelimit.Lease, error) { return keyed.Acquire(ctx, d.key, n) }
		refund = func(l ratelimit.Lease, n int) error { return s.giveBack(ctx, keyed, d, l, n) }
	default:
		r := d.rule
		mode, shadow, d.name = r.FailureMode, r.ShadowMode, r.PolicyName
		limit = &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
		if r.PolicyName != "" {
			d.cfg = r.Config()
			keyed := s.rules.Keyed(r.PolicyName, App)
			acquire = func(n int) (ratelimit.Lease, error) { return keyed.Acquire(ctx, d.key, n) }
			refund = func(l ratelimit.Lease, n int) error { return s.giveBack(ctx, keyed, d, l, n) }
		}
	}
	if len(d.key) > policy.MaxKeyLen {
		sum := sha256.Sum256([]byte(d.key))
		d.key = "sha256:" + hex.EncodeToString(sum[:])
	}

	if acquire == nil { // requests_per_unit 0: every hit is over it
		d.over = d.hits > 0
		d.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: limit,
			DurationUntilReset: wholeSeconds(windowLeft(unitLength(limit.Unit), now))}
		if d.over && !shadow {
			d.status.Code = rlspb.RateLimitResponse_OVER_LIMIT
		}
		return nil
	}
	cached := fixed && !shadow && s.over != nil
	var counter string // the window's, in the local over-limit cache
	if cached {
		counter = d.name + "\x00" + d.key
	}
	if cached && s.over.over(cfg, counter, now) {
		left := windowLeft(unitLength(limit.Unit), now)
		past := &ratelimit.Outcome{Limit: int64(limit.RequestsPerUnit), Reason: ratelimit.ReasonLimit}
		d.lease, d.over = past.Lease(0, left, left, 0), true
		d.status = s.status(d, limit, d.lease, false, fixed, shadow, now)
		return nil
	}
	n := permits(d.hits)
	lease, err := acquire(n)
	exceeds := errors.Is(err, ratelimit.ErrExceedsLimit)
	if exceeds && fixed {
		// More hits than the policy holds (the limit and its extra
		// permit): past the limit, as a count past it is. Asking for the
		// whole policy takes an empty window in one step, or is refused
		// with the time left in the window, for fill.
		lease, err = acquire(int(limit.RequestsPerUnit) + 1)
		exceeds = errors.Is(err, ratelimit.ErrExceedsLimit) // the limit was lowered meanwhile
	}
	if exceeds {
		lease, err = acquire(0)
	}
	if err != nil {
		return s.failed(ctx, d, mode, err)
	}
	switch {
	case exceeds || !lease.Acquired():
		d.over = true
		if fixed {
			lease = fill(lease, unitLength(limit.Unit), s.opts.Now(), s.opts.Now, acquire, refund) // now: when the decision came back
		}
	case fixed && (lease.Remaining() == 0 || n > int(limit.RequestsPerUnit)):
		d.over = true // the hits took the count past the limit (see counting)
	case n > 0:
		d.refund = func() error { return refund(lease, n) }
	}
	d.lease = shown(lease, fixed)
	d.status = s.status(d, limit, d.lease, !d.over, fixed, shadow, now)
	if cached && d.over {
		s.over.add(cfg, counter, now, now.Add(windowLeft(unitLength(limit.Unit), now)))
	}
	return nil
}

// fill counts hits past the limit in a window of envoyproxy/ratelimit's
// (see counting), whose decision is lease: the policy's remaining permits
// are taken, its extra one included, so that the window stays over the
// limit until it ends. Other calls (of this server or another) may take
// some between two asks: it asks again for what is left then, fillTries
// times at most. An ask answered in a later window of length w (the
// decision's ended meanwhile) takes nothing there: what it was granted is
// given back. An answer is in a later window when the time left in its
// window is longer, by more than half a window, than the decision's less
// the time since the decision came back (at, by now's clock): in the same
// window it is that, in the next a window more. The decision's time left
// is the lease's, or, when the lease does not tell (an empty window's
// status check), that of the window of at by now's clock. It returns the
// lease to report.
func fill(lease ratelimit.Lease, w time.Duration, at time.Time, now func() time.Time, acquire func(int) (ratelimit.Lease, error), giveBack func(ratelimit.Lease, int) error) ratelimit.Lease {
	decided, known := windowLeftOf(lease)
	if !known {
		decided = windowLeft(w, at)
	}
	for range fillTries {
		if lease.Remaining() <= 0 {
			return lease
		}
		n := int(lease.Remaining())
		l, err := acquire(n)
		if err != nil {
			return lease
		}
		if left, ok := windowLeftOf(l); ok && left > decided-now().Sub(at)+w/2 {
			if l.Acquired() {
				giveBack(l, n)
			}
			return lease
		}
		if l.Acquired() {
			return l
		}
		lease = l // refused: fewer are left now
	}
	return lease
}

// windowLeftOf is the time left in the fixed window that decided lease, as
// its backend's clock read it: a refusal's RetryAfter, or the ResetAfter
// of a window that counts something. Within one window it only shrinks (but
// for the backend's clock's and a cached refusal's noise); a later
// window's is a window longer, less the time between the two readings. ok
// is false when lease does not tell (an empty window's status check).
func windowLeftOf(lease ratelimit.Lease) (left time.Duration, ok bool) {
	if d, ok := lease.RetryAfter(); ok {
		return d, true
	}
	if d := lease.ResetAfter(); d > 0 {
		return d, true
	}
	return 0, false
}

// fillTries bounds fill's asks: each one that is refused found permits
// taken since the one before, which only calls racing it can do.
const fillTries = 4

// shown is lease as a window of envoyproxy/ratelimit's reports it: without
// the extra permit that its policy counts (see counting). Other leases
// are returned as they are.
func shown(lease ratelimit.Lease, fixed bool) ratelimit.Lease {
	o := lease.Outcome()
	if !fixed || o == nil || lease.Limit() <= 0 {
		return lease
	}
	retry, ok := lease.RetryAfter()
	if !ok {
		retry = -1
	}
	visible := &ratelimit.Outcome{Limit: lease.Limit() - 1, Reason: o.Reason, Grows: o.Grows}
	return visible.Lease(max(lease.Remaining()-1, 0), retry, lease.ResetAfter(), 0)
}

// status is the descriptor status of lease.
func (s *Service) status(d *decision, limit *rlspb.RateLimitResponse_RateLimit, lease ratelimit.Lease, ok, fixed, shadow bool, now time.Time) *rlspb.RateLimitResponse_DescriptorStatus {
	st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: limit}
	if limit == nil {
		st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: d.name, RequestsPerUnit: uint32(min(max(lease.Limit(), 0), math.MaxUint32)), Unit: unitOf(d.cfg)}
	}
	if ok {
		st.LimitRemaining = uint32(min(max(lease.Remaining(), 0), math.MaxUint32))
	} else if !shadow {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	var left time.Duration
	if !ok {
		if ra, known := lease.RetryAfter(); known && !fixed {
			left = ra
		}
	}
	if left <= 0 {
		left = lease.ResetAfter()
	}
	if fixed && (left <= 0 || left > unitLength(st.CurrentLimit.Unit)) {
		left = windowLeft(unitLength(st.CurrentLimit.Unit), now)
	}
	st.DurationUntilReset = wholeSeconds(left)
	return st
}

// wholeSeconds is d as a status's duration_until_reset: whole seconds,
// rounded up, at least one (envoyproxy/ratelimit's; the Retry-After
// header is its figure).
func wholeSeconds(d time.Duration) *durationpb.Duration {
	return &durationpb.Duration{Seconds: max(check.CeilSeconds(d), 1)}
}

// windowLeft is the time until the end of now's window of length w,
// windows aligned to the Unix epoch: in (0, w].
func windowLeft(w time.Duration, now time.Time) time.Duration {
	if w <= 0 {
		return time.Second
	}
	return w - time.Duration(now.UnixNano()%int64(w))
}

// unitOf is the unit of cfg's window when it is one; UNKNOWN otherwise.
func unitOf(cfg ratelimit.Config) rlspb.RateLimitResponse_RateLimit_Unit {
	if w := algo.Window(cfg); w > 0 {
		for u := range rlspb.RateLimitResponse_RateLimit_Unit_name {
			if unit := rlspb.RateLimitResponse_RateLimit_Unit(u); unitLength(unit) == w {
				return unit
			}
		}
	}
	return rlspb.RateLimitResponse_RateLimit_UNKNOWN
}

// failed applies mode to a descriptor whose limiter could not decide.
func (s *Service) failed(ctx context.Context, d *decision, mode FailureMode, err error) error {
	switch mode {
	case FailOpen:
		d.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		return nil
	case FailClosed:
		d.over = true
		d.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT}
		return nil
	}
	if ctx.Err() != nil { // the call's own deadline or cancellation
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "envoy: descriptor %q could not be decided: %v", d.key, err)
}

// respond makes the response of ds: the statuses, the overall code, and
// the RateLimit, RateLimit-Policy and Retry-After fields of
// draft-ietf-httpapi-ratelimit-headers-11, as httplimit's middleware
// writes them.
func (s *Service) respond(ds []decision, now time.Time) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ds))}
	var pol, lim []byte
	var retry int64
	for i := range ds {
		d := &ds[i]
		resp.Statuses[i] = d.status
		if d.status.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			retry = max(retry, d.status.GetDurationUntilReset().GetSeconds())
		}
		if d.lease.Limit() > 0 && d.name != "" {
			pol, lim, _ = httplimit.AppendFields(pol, lim, d.name, d.cfg, 0, d.lease, now)
		}
	}
	if len(pol) > 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corepb.HeaderValue{Key: "RateLimit-Policy", Value: string(pol)},
			&corepb.HeaderValue{Key: "RateLimit", Value: string(lim)})
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && retry > 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corepb.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(retry, 10)})
	}
	return resp
}

// giveBack gives back n hits of d, granted by lease, to k's limiter of
// d's key (refundKey), and tells OnError when it cannot: they stay
// counted.
func (s *Service) giveBack(ctx context.Context, k ratelimit.Keyed, d *decision, lease ratelimit.Lease, n int) error {
	err := refundKey(ctx, k, d.key, lease, n)
	if err != nil && s.opts.OnError != nil {
		s.opts.OnError(fmt.Errorf("envoy: %d hits of %s could not be given back, and stay counted: %w", n, d.name, err))
	}
	return err
}

// refundKey gives lease, a grant of key by k, back to k's limiter of key
// (a policy registry's Keyed has one: see ratelimit.Keyed and
// control.Refund).
func refundKey(ctx context.Context, k ratelimit.Keyed, key string, lease ratelimit.Lease, permits int) error {
	f, ok := k.(interface {
		For(string) ratelimit.Limiter
	})
	if !ok {
		return fmt.Errorf("envoy: %T cannot refund: %w", k, errors.ErrUnsupported)
	}
	return control.Refund(ctx, f.For(key), lease, permits)
}
