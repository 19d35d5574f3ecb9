package envoy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/policy"
	"github.com/limitkit/ratelimit/ratelimittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a service on a loopback port and a client of it built from
// go-control-plane's generated code.
type env struct {
	svc    *Service
	src    *Source
	client rlspb.RateLimitServiceClient
	clock  *ratelimittest.Clock
	dir    string
}

// writeConfig writes files into dir (the configuration directory).
func writeConfig(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// start serves files (a configuration directory) with opts (Source, Now
// and, unless set, a memory Backend on a fake clock are filled in).
func start(t testing.TB, files map[string]string, opts Options) *env {
	t.Helper()
	dir := t.TempDir()
	writeConfig(t, dir, files)
	e := &env{dir: dir, clock: ratelimittest.NewClock()}
	src, err := NewSource(dir, SourceOptions{Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	opts.Source = src
	if opts.Backend == nil {
		opts.Backend = policy.Memory(memory.WithClock(e.clock))
		opts.Now = e.clock.Now
	}
	svc, err := NewService(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, svc)
	go gs.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		svc.Close()
	})
	e.svc, e.src, e.client = svc, src, rlspb.NewRateLimitServiceClient(conn)
	return e
}

// desc is a request descriptor of key-value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *env) call(t *testing.T, domain string, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// wantStatus checks a status's code, limit and remaining.
func wantStatus(t *testing.T, st *rlspb.RateLimitResponse_DescriptorStatus, code rlspb.RateLimitResponse_Code, rpu uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, remaining uint32) {
	t.Helper()
	if st.Code != code || st.LimitRemaining != remaining {
		t.Fatalf("status %v remaining %d, want %v remaining %d", st.Code, st.LimitRemaining, code, remaining)
	}
	if rpu == 0 {
		if st.CurrentLimit != nil || st.DurationUntilReset != nil {
			t.Fatalf("status has a limit %v (reset %v), want none", st.CurrentLimit, st.DurationUntilReset)
		}
		return
	}
	if st.CurrentLimit.GetRequestsPerUnit() != rpu || st.CurrentLimit.GetUnit() != unit {
		t.Fatalf("limit %v, want %d per %v", st.CurrentLimit, rpu, unit)
	}
	if s := st.GetDurationUntilReset().GetSeconds(); s < 1 || s > int64(unitLength(unit)/time.Second) {
		t.Fatalf("duration_until_reset %ds, out of (0, %v]", s, unitLength(unit))
	}
}

// The integration test configurations of envoyproxy/ratelimit (their
// runtime config basic.yaml and another.yaml), written for limitkit.
var integrationFiles = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
	"another.yaml": `domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 20}
`,
}

// Their integration test (testBasicBaseConfig), call by call.
func TestIntegrationBasic(t *testing.T) {
	e := start(t, integrationFiles, Options{})
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT

	resp := e.call(t, "foo", 1, desc("hello", "world"))
	if resp.OverallCode != ok {
		t.Fatalf("unknown domain: %v", resp.OverallCode)
	}
	wantStatus(t, resp.Statuses[0], ok, 0, 0, 0)

	resp = e.call(t, "basic", 1, desc("key1", "foo"))
	wantStatus(t, resp.Statuses[0], ok, 50, second, 49)

	// Over a minute limit with one key: 20 OK, then OVER_LIMIT.
	for i := 0; i < 25; i++ {
		resp = e.call(t, "another", 1, desc("key2", "a-random-value"))
		code, remaining := ok, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = over, 0
		}
		if resp.OverallCode != code {
			t.Fatalf("request %d: overall %v, want %v", i, resp.OverallCode, code)
		}
		wantStatus(t, resp.Statuses[0], code, 20, minute, remaining)
	}

	// Two keys of one domain: key3's hour limit refuses from the 11th on,
	// and key2 goes on counting (refused requests count everywhere).
	for i := 0; i < 15; i++ {
		resp = e.call(t, "another", 1, desc("key2", "another-value"), desc("key3", "another-value"))
		code, r3 := ok, uint32(10-(i+1))
		if i >= 10 {
			code, r3 = over, 0
		}
		if resp.OverallCode != code {
			t.Fatalf("request %d: overall %v, want %v", i, resp.OverallCode, code)
		}
		wantStatus(t, resp.Statuses[0], ok, 20, minute, uint32(20-(i+1)))
		wantStatus(t, resp.Statuses[1], code, 10, hour, r3)
	}

	// duration_until_reset counts down.
	d1 := e.call(t, "another", 1, desc("key4", "durTest")).Statuses[0].DurationUntilReset.GetSeconds()
	e.clock.Advance(2 * time.Second)
	d2 := e.call(t, "another", 1, desc("key4", "durTest")).Statuses[0].DurationUntilReset.GetSeconds()
	if d2 != d1-2 {
		t.Fatalf("duration_until_reset %d then, 2s later, %d", d1, d2)
	}
}

// Their newer integration test sends the 25 and the 15 requests at once.
func TestIntegrationConcurrent(t *testing.T) {
	e := start(t, integrationFiles, Options{})
	count := func(n int, ds ...*rlcommon.RateLimitDescriptor) (oks int) {
		codes := make(chan rlspb.RateLimitResponse_Code, n)
		for i := 0; i < n; i++ {
			go func() {
				resp, err := e.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "another", Descriptors: ds, HitsAddend: 1})
				if err != nil {
					t.Error(err)
					codes <- rlspb.RateLimitResponse_UNKNOWN
					return
				}
				codes <- resp.OverallCode
			}()
		}
		for i := 0; i < n; i++ {
			if <-codes == rlspb.RateLimitResponse_OK {
				oks++
			}
		}
		return oks
	}
	if oks := count(25, desc("key2", "c1")); oks != 20 {
		t.Fatalf("%d of 25 OK under a limit of 20", oks)
	}
	if oks := count(15, desc("key2", "c2"), desc("key3", "c2")); oks != 10 {
		t.Fatalf("%d of 15 OK under a limit of 10", oks)
	}
}

// Every field of every status is what the limiter says when asked
// directly, on the same fake clock, through a sequence of hits.
func TestStatusMatchesLimiter(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 7, name: per-user}
  - key: path
    value: /api*
    rate_limit: {unit: hour, requests_per_unit: 12}
`}, Options{})
	cfg := e.src.Config()
	type step struct {
		kv      []string
		hits    uint64
		advance time.Duration
	}
	steps := []step{
		{[]string{"user", "alice"}, 1, 0}, {[]string{"user", "alice"}, 3, 0}, {[]string{"user", "alice"}, 2, 10 * time.Second},
		{[]string{"user", "alice"}, 2, 0}, {[]string{"user", "alice"}, 0, 0}, {[]string{"user", "bob"}, 7, 0},
		{[]string{"user", "alice"}, 1, time.Minute}, {[]string{"path", "/api/v1"}, 5, 0}, {[]string{"path", "/api/v2"}, 8, 0},
		{[]string{"path", "/api/v1"}, 0, 30 * time.Minute}, {[]string{"user", "bob"}, 0, 0},
	}
	for i, s := range steps {
		e.clock.Advance(s.advance)
		d := desc(s.kv...)
		d.HitsAddend = wrapperspb.UInt64(s.hits)
		st := e.call(t, "d", 1, d).Statuses[0]
		rule, key := cfg.Match("d", es(s.kv...))
		direct, err := e.svc.Rules().Peek(context.Background(), rule.PolicyName, key)
		if err != nil {
			t.Fatal(err)
		}
		// The limiter counts one permit more than the rule's limit: its
		// last stands for a count past the limit.
		if l := st.CurrentLimit; l.GetRequestsPerUnit() != uint32(direct.Limit()-1) || l.GetUnit() != rule.Unit || l.GetName() != rule.Name {
			t.Fatalf("step %d: current_limit %v, the limiter's limit %d per %v", i, l, direct.Limit(), rule.Unit)
		}
		// Within the limit, what the limiter has left but the extra
		// permit; past it (the extra permit taken), nothing.
		wantCode, wantRemaining := rlspb.RateLimitResponse_OK, uint32(max(direct.Remaining()-1, 0))
		if direct.Remaining() == 0 {
			wantCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if st.Code != wantCode || st.LimitRemaining != wantRemaining {
			t.Fatalf("step %d: %v remaining %d; the limiter: remaining %d", i, st.Code, st.LimitRemaining, direct.Remaining())
		}
		reset := direct.ResetAfter()
		if reset == 0 {
			reset = windowLeft(rule.Window(), e.clock.Now())
		}
		if got := st.DurationUntilReset.GetSeconds(); got != check.CeilSeconds(reset) {
			t.Fatalf("step %d: duration_until_reset %ds, the limiter's window ends in %v", i, got, reset)
		}
	}
}

// hits_addend: the request's 0 means 1; a descriptor's own wins, and its
// 0 checks without counting (OK in a window exactly at its limit, over it
// once a hit went past); more hits than the limit are over it, and
// counted, as refused hits are: the window stays closed.
func TestHitsAddend(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"}, Options{})
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	// hits is value's descriptor with its own hits_addend n.
	hits := func(value string, n uint64) *rlcommon.RateLimitDescriptor {
		d := desc("k", value)
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	wantStatus(t, e.call(t, "d", 0, desc("k", "a")).Statuses[0], ok, 10, minute, 9)
	wantStatus(t, e.call(t, "d", 3, desc("k", "a")).Statuses[0], ok, 10, minute, 6)
	wantStatus(t, e.call(t, "d", 5, hits("a", 2)).Statuses[0], ok, 10, minute, 4)
	wantStatus(t, e.call(t, "d", 5, hits("a", 0)).Statuses[0], ok, 10, minute, 4)
	wantStatus(t, e.call(t, "d", 5, hits("a", 0)).Statuses[0], ok, 10, minute, 4)
	// 6 of 10 used; 5 more is over, and counted: 1 then is over too.
	wantStatus(t, e.call(t, "d", 5, desc("k", "a")).Statuses[0], over, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, desc("k", "a")).Statuses[0], over, 10, minute, 0)
	// Exactly at the limit, a check is OK; past it, over.
	wantStatus(t, e.call(t, "d", 10, desc("k", "e")).Statuses[0], ok, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, hits("e", 0)).Statuses[0], ok, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, desc("k", "e")).Statuses[0], over, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, hits("e", 0)).Statuses[0], over, 10, minute, 0)
	// A refusal with permits left takes the count past the limit too.
	wantStatus(t, e.call(t, "d", 8, desc("k", "f")).Statuses[0], ok, 10, minute, 2)
	wantStatus(t, e.call(t, "d", 3, desc("k", "f")).Statuses[0], over, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, hits("f", 0)).Statuses[0], over, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, desc("k", "f")).Statuses[0], over, 10, minute, 0)
	// More hits than the limit holds: over, and the window is closed.
	wantStatus(t, e.call(t, "d", 11, desc("k", "b")).Statuses[0], over, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, desc("k", "b")).Statuses[0], over, 10, minute, 0)
	wantStatus(t, e.call(t, "d", 1, hits("c", math.MaxUint64)).Statuses[0], over, 10, minute, 0)
	// The next window is open again, aligned to the epoch.
	e.clock.Advance(windowLeft(time.Minute, e.clock.Now()))
	wantStatus(t, e.call(t, "d", 1, desc("k", "b")).Statuses[0], ok, 10, minute, 9)
}

// smallAndBig is a domain of two limits, of 1 and 10 hits an hour.
const smallAndBig = `domain: d
descriptors:
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a refused call's hits on the
// other descriptors are given back; by default they stay counted.
func TestStopCountingOverLimit(t *testing.T) {
	files := map[string]string{"d.yaml": smallAndBig}
	for _, stop := range []bool{false, true} {
		t.Run("stop="+strconv.FormatBool(stop), func(t *testing.T) {
			e := start(t, files, Options{StopCountingOverLimit: stop})
			e.call(t, "d", 1, desc("small", "x"), desc("big", "x"))
			resp := e.call(t, "d", 1, desc("small", "x"), desc("big", "x"))
			if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("overall %v", resp.OverallCode)
			}
			want := uint32(8)
			if stop {
				want = 9
			}
			if got := resp.Statuses[1].LimitRemaining; got != want {
				t.Fatalf("big's remaining in the response %d, want %d", got, want)
			}
			if got := e.call(t, "d", 1, desc("big", "x")).Statuses[0].LimitRemaining; got != want-1 {
				t.Fatalf("big's remaining after one more hit %d, want %d", got, want-1)
			}
		})
	}
}

// replaces, unlimited, shadow_mode and a descriptor without a limit.
func TestReplacesUnlimitedShadow(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": `domain: d
descriptors:
  - key: base
    rate_limit: {unit: hour, requests_per_unit: 1, name: base-limit}
  - key: premium
    rate_limit:
      unit: hour
      requests_per_unit: 3
      replaces: [{name: base-limit}]
  - key: free
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: open
    value: door
`}, Options{})
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	for i := 0; i < 3; i++ {
		resp := e.call(t, "d", 1, desc("base", "u"), desc("premium", "u"))
		wantStatus(t, resp.Statuses[0], ok, 0, 0, 0) // replaced: not counted
		wantStatus(t, resp.Statuses[1], ok, 3, hour, uint32(2-i))
	}
	// base alone is not replaced, and was never counted.
	wantStatus(t, e.call(t, "d", 1, desc("base", "u")).Statuses[0], ok, 1, hour, 0)
	wantStatus(t, e.call(t, "d", 1, desc("base", "u")).Statuses[0], over, 1, hour, 0)

	st := e.call(t, "d", 1, desc("free", "u")).Statuses[0]
	if st.Code != ok || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
		t.Fatalf("unlimited: %v", st)
	}
	wantStatus(t, e.call(t, "d", 1, desc("open", "door")).Statuses[0], ok, 0, 0, 0)

	wantStatus(t, e.call(t, "d", 1, desc("trial", "u")).Statuses[0], ok, 1, hour, 0)
	resp := e.call(t, "d", 1, desc("trial", "u"))
	if resp.OverallCode != ok {
		t.Fatalf("shadow mode: overall %v", resp.OverallCode)
	}
	wantStatus(t, resp.Statuses[0], ok, 1, hour, 0)
	if h := header(resp, "Retry-After"); h != "" {
		t.Fatalf("Retry-After %q on an OK answer", h)
	}
}

func header(resp *rlspb.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, name) {
			return h.Value
		}
	}
	return ""
}

// The request's limit override (their TestConfigLimitOverride): it
// decides wherever the domain is known, per entries, without shadow mode.
func TestLimitOverride(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": `domain: test-domain
descriptors:
  - key: key1
    value: value1
    shadow_mode: true
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
`}, Options{})
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	withLimit := func(rpu uint32, unit typepb.RateLimitUnit, kv ...string) *rlcommon.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	wantStatus(t, e.call(t, "foo_domain", 1, withLimit(10, typepb.RateLimitUnit_DAY, "a", "b")).Statuses[0], ok, 0, 0, 0)
	for i := 0; i < 3; i++ {
		st := e.call(t, "test-domain", 1, withLimit(2, typepb.RateLimitUnit_DAY, "key1", "value1", "subkey1", "something")).Statuses[0]
		if i < 2 {
			wantStatus(t, st, ok, 2, day, uint32(1-i))
		} else {
			wantStatus(t, st, over, 2, day, 0)
		}
	}
	// Another value counts apart.
	wantStatus(t, e.call(t, "test-domain", 1, withLimit(2, typepb.RateLimitUnit_DAY, "key1", "value1", "subkey1", "else")).Statuses[0], ok, 2, day, 1)
	// An override of 0 requests refuses every hit.
	st := e.call(t, "test-domain", 1, withLimit(0, typepb.RateLimitUnit_HOUR, "x", "y")).Statuses[0]
	if st.Code != over || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.CurrentLimit.GetUnit() != hour || st.LimitRemaining != 0 {
		t.Fatalf("override of 0 per hour: %v", st)
	}
	_, err := e.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "test-domain",
		Descriptors: []*rlcommon.RateLimitDescriptor{withLimit(1, typepb.RateLimitUnit_UNKNOWN, "x", "y")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("override without a unit: %v", err)
	}
}

// Calls the service refuses, and a configuration that does not load at
// start: served errors until it does, as envoyproxy/ratelimit does.
func TestErrorsAndReload(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"}, Options{})
	for _, req := range []*rlspb.RateLimitRequest{
		{Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}},
		{Domain: "d"},
	} {
		if _, err := e.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v", req, err)
		}
	}
	_, err := e.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("bad configuration at start: %v", err)
	}
	if e.src.Err() == nil {
		t.Fatal("Source.Err is nil after a bad configuration")
	}

	// Fixed: served (the registry's watcher reads it).
	writeConfig(t, e.dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"})
	waitFor(t, func() bool { return e.src.Config() != nil })
	wantStatus(t, e.call(t, "d", 1, desc("k", "v")).Statuses[0], rlspb.RateLimitResponse_OK, 3, hour, 2)

	// A new limit applies in place: the window's count is kept.
	writeConfig(t, e.dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	waitFor(t, func() bool { r, _ := e.src.Config().Match("d", es("k", "v")); return r.RequestsPerUnit == 5 })
	wantStatus(t, e.call(t, "d", 1, desc("k", "v")).Statuses[0], rlspb.RateLimitResponse_OK, 5, hour, 3)

	// A bad file is reported and the last valid configuration served.
	writeConfig(t, e.dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n"})
	waitFor(t, func() bool { return e.src.Err() != nil })
	wantStatus(t, e.call(t, "d", 1, desc("k", "v")).Statuses[0], rlspb.RateLimitResponse_OK, 5, hour, 2)

	// A new rule is served with its limiters from the moment it matches.
	writeConfig(t, e.dir, map[string]string{"e.yaml": "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"d.yaml": "domain: d\n"})
	waitFor(t, func() bool { return e.src.Config().Has("e") })
	wantStatus(t, e.call(t, "e", 1, desc("k", "v")).Statuses[0], rlspb.RateLimitResponse_OK, 1, hour, 0)
	wantStatus(t, e.call(t, "d", 1, desc("k", "v")).Statuses[0], rlspb.RateLimitResponse_OK, 0, 0, 0)
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}

// The RateLimit fields are httplimit's (draft -11) and Retry-After is the
// time the refusing window has left.
func TestHeaders(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"}, Options{})
	r, _ := e.src.Config().Match("d", es("k", "v"))
	left := strconv.FormatInt(check.CeilSeconds(windowLeft(time.Minute, e.clock.Now())), 10)
	resp := e.call(t, "d", 1, desc("k", "v"))
	if got, want := header(resp, "RateLimit-Policy"), `"`+r.PolicyName+`";q=2;w=60`; got != want {
		t.Fatalf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := header(resp, "RateLimit"), `"`+r.PolicyName+`";r=1;t=`+left; got != want {
		t.Fatalf("RateLimit %q, want %q", got, want)
	}
	e.call(t, "d", 1, desc("k", "v"))
	resp = e.call(t, "d", 1, desc("k", "v"))
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || header(resp, "Retry-After") != left {
		t.Fatalf("%v, Retry-After %q, want %s", resp.OverallCode, header(resp, "Retry-After"), left)
	}
	if got, want := header(resp, "RateLimit"), `"`+r.PolicyName+`";r=0;t=`+left; got != want {
		t.Fatalf("RateLimit %q, want %q", got, want)
	}
}

// fill asks again for what is left when a racing call took some of the
// policy's permits between its asks, and stops after fillTries asks.
func TestFillAsksAgain(t *testing.T) {
	granted := &ratelimit.Outcome{Limit: 11}
	refused := &ratelimit.Outcome{Limit: 11, Reason: ratelimit.ReasonLimit}
	left := int64(4) // what the policy has left; each refused ask finds one fewer
	var asks []int
	acquire := func(n int) (ratelimit.Lease, error) {
		asks = append(asks, n)
		if int64(n) <= left {
			left -= int64(n)
			return granted.Lease(left, -1, time.Minute, 0), nil
		}
		return refused.Lease(left, time.Minute, time.Minute, 0), nil
	}
	race := func(n int) (ratelimit.Lease, error) { left--; return acquire(n) } // a racing call takes one first
	lease := fill(refused.Lease(left, time.Minute, time.Minute, 0), time.Hour, time.Now(), time.Now, func(n int) (ratelimit.Lease, error) {
		if len(asks) < 2 {
			return race(n)
		}
		return acquire(n)
	}, nil)
	if !lease.Acquired() || lease.Remaining() != 0 || left != 0 || !slices.Equal(asks, []int{4, 3, 2}) {
		t.Fatalf("after asks %v: %v, %d left; want every permit taken at the third ask", asks, lease, left)
	}
	asks, left = nil, 100
	lease = fill(refused.Lease(left, time.Minute, time.Minute, 0), time.Hour, time.Now(), time.Now, race, nil)
	if lease.Acquired() || len(asks) != fillTries {
		t.Fatalf("racing every ask: %v after %d asks, want a refusal after %d", lease, len(asks), fillTries)
	}
}

// fill takes nothing in a window after its decision's: a call past the
// limit 1ms before a window's end, whose fill is answered after it, leaves
// the next window as it was (envoyproxy/ratelimit counts its hits in one
// step, in the decision's window).
func TestFillStaysInItsWindow(t *testing.T) {
	ctx := context.Background()
	e := start(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n"}, Options{})
	for _, hits := range []int{1, 5} { // a refusal (then one over the limit), and more hits than the policy holds when its limit was lowered
		e.clock.Advance(windowLeft(time.Second, e.clock.Now()) - time.Millisecond) // 1ms before a window's end
		rule, counter := e.src.Config().Match("d", es("k", fmt.Sprint(hits)))
		keyed := e.svc.Rules().Keyed(rule.PolicyName, App)
		refund := func(l ratelimit.Lease, n int) error { return refundKey(ctx, keyed, counter, l, n) }
		if hits == 1 {
			if l, err := keyed.Acquire(ctx, counter, 2); err != nil || !l.Acquired() {
				t.Fatalf("2 of 2+1: %v %v", l, err)
			}
		}
		decision, err := keyed.Acquire(ctx, counter, hits+1) // past the limit: refused
		if err != nil {
			decision, err = keyed.Acquire(ctx, counter, 0) // as decide asks when the hits exceed the policy
		}
		if err != nil {
			t.Fatal(err)
		}
		asked := false
		fill(decision, time.Second, e.clock.Now(), e.clock.Now, func(n int) (ratelimit.Lease, error) {
			if !asked {
				e.clock.Advance(2 * time.Millisecond) // the ask arrives after the window's end
				asked = true
			}
			return keyed.Acquire(ctx, counter, n)
		}, refund)
		if !asked {
			t.Fatalf("%d hits: fill asked nothing", hits)
		}
		if st := e.call(t, "d", 1, desc("k", fmt.Sprint(hits))).Statuses[0]; st.Code != rlspb.RateLimitResponse_OK || st.LimitRemaining != 1 {
			t.Fatalf("%d hits: the next window's first hit is %v, remaining %d; want OK, 1", hits, st.Code, st.LimitRemaining)
		}
	}
}

// fill's window check holds whatever the stall between the decision and
// its ask (a decision 400ms before its window's end, an ask 600ms later),
// and a backend whose clock is ahead of the service's decides more hits
// than the policy holds in its own window, in one step.
func TestFillWindowsAcrossStallsAndClocks(t *testing.T) {
	ctx := context.Background()
	cfg := map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n"}
	ok, over, second := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_RateLimit_SECOND
	t.Run("stall", func(t *testing.T) {
		e := start(t, cfg, Options{})
		e.clock.Advance(windowLeft(time.Second, e.clock.Now()) - 400*time.Millisecond)
		rule, counter := e.src.Config().Match("d", es("k", "v"))
		keyed := e.svc.Rules().Keyed(rule.PolicyName, App)
		keyed.Acquire(ctx, counter, 2)
		decision, err := keyed.Acquire(ctx, counter, 2) // refused: 1 left of the policy's 3
		if err != nil || decision.Acquired() {
			t.Fatalf("%v %v", decision, err)
		}
		at := e.clock.Now()
		fill(decision, time.Second, at, e.clock.Now, func(n int) (ratelimit.Lease, error) {
			e.clock.Advance(600 * time.Millisecond) // the ask arrives in the next window
			return keyed.Acquire(ctx, counter, n)
		}, func(l ratelimit.Lease, n int) error { return refundKey(ctx, keyed, counter, l, n) })
		wantStatus(t, e.call(t, "d", 1, desc("k", "v")).Statuses[0], ok, 2, second, 1)
	})
	t.Run("backend ahead", func(t *testing.T) {
		service := ratelimittest.NewClock()
		backend := ratelimittest.NewClockAt(service.Now().Add(10 * time.Millisecond))
		e := start(t, cfg, Options{Backend: policy.Memory(memory.WithClock(backend)), Now: service.Now})
		advance := func(d time.Duration) { service.Advance(d); backend.Advance(d) }
		advance(windowLeft(time.Second, service.Now()) - 5*time.Millisecond) // the backend is 5ms into its next window
		wantStatus(t, e.call(t, "d", 5, desc("k", "v")).Statuses[0], over, 2, second, 0)
		advance(time.Millisecond)
		wantStatus(t, e.call(t, "d", 1, desc("k", "v")).Statuses[0], over, 2, second, 0) // theirs: 6 > 2
	})
}

// noRefunds is a policy backend whose limiters cannot give a grant back:
// their Refund fails, as a backend that went down meanwhile does.
func noRefunds(clock ratelimit.Clock) policy.Backend {
	return func(p policy.Policy) (policy.Factory, error) {
		f, err := memory.NewFactory(p.Config, memory.WithClock(clock))
		return refuseRefunds{f}, err
	}
}

type refuseRefunds struct{ f *memory.Factory }

func (r refuseRefunds) ForKey(key string) (ratelimit.Limiter, error) {
	l, err := r.f.ForKey(key)
	return failingRefund{l}, err
}

// failingRefund is a limiter whose Refund fails; package control reaches
// the rest (IdleFor, for partitioned) through Unwrap.
type failingRefund struct{ ratelimit.Limiter }

func (failingRefund) Refund(context.Context, ratelimit.Lease, int) error {
	return errors.New("the backend is down")
}

func (f failingRefund) Unwrap() ratelimit.Limiter { return f.Limiter }

// With StopCountingOverLimit, hits that could not be given back stay
// counted, and the response and OnError say so: the big limit's status
// shows 8 left after a refused call of 1 hit (its hit kept), not 9.
func TestStopCountingOverLimitReportsAFailedGiveBack(t *testing.T) {
	files := map[string]string{"d.yaml": smallAndBig}
	clock := ratelimittest.NewClock()
	var mu sync.Mutex
	var errs []error
	e := start(t, files, Options{StopCountingOverLimit: true, Backend: noRefunds(clock), Now: clock.Now,
		OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
	e.call(t, "d", 1, desc("small", "x"), desc("big", "x"))
	resp := e.call(t, "d", 1, desc("small", "x"), desc("big", "x"))
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("overall %v", resp.OverallCode)
	}
	if got := resp.Statuses[1].LimitRemaining; got != 8 {
		t.Fatalf("big's remaining in the response %d, want 8: its hit could not be given back", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "the backend is down") {
		t.Fatalf("OnError got %v, want the failed give-back once", errs)
	}
}

// A limit of 0 requests per unit refuses every hit with the time left in
// the window in whole seconds, as every other refusal, and the response
// tells it in Retry-After.
func TestZeroLimitResetsInWholeSeconds(t *testing.T) {
	e := start(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"}, Options{})
	e.clock.Advance(windowLeft(time.Minute, e.clock.Now()) + 59*time.Second + 400*time.Millisecond) // 0.6s left in the minute
	resp := e.call(t, "d", 1, desc("k", "a"))
	st := resp.Statuses[0]
	if st.Code != rlspb.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset.GetSeconds() != 1 || st.DurationUntilReset.GetNanos() != 0 {
		t.Fatalf("status %v, reset %v; want OVER_LIMIT, 1s", st.Code, st.DurationUntilReset)
	}
	retry := ""
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == "Retry-After" {
			retry = h.Value
		}
	}
	if retry != "1" {
		t.Fatalf("Retry-After %q, want 1", retry)
	}
}
