package envoy

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/policy"
)

// Every answer is envoyproxy/ratelimit's, whose window is a plain counter:
// every hit is added, refused or not, and a descriptor is over its limit
// when the count is. Random sequences of hits (0, a few, about the limit,
// 2^64-1) on a rule, a shadow_mode rule and a request's limit override, on
// memory and on a redis-server: the status's code, limit_remaining and
// current_limit, the RateLimit r, the RateLimit-Policy q and Retry-After
// are the counter's.
func TestDecisionsMatchTheirCounter(t *testing.T) {
	const limit = 4
	files := map[string]string{"d.yaml": fmt.Sprintf(`domain: d
descriptors:
  - key: rule
    rate_limit: {unit: year, requests_per_unit: %d}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: %d}
`, limit, limit)}
	backends := map[string]func(t *testing.T) Options{
		"memory": func(t *testing.T) Options { return Options{} },
		"redis": func(t *testing.T) Options {
			c := goredis.NewClient(&goredis.Options{Addr: redistest.Standalone(t)})
			t.Cleanup(func() { c.Close() })
			return Options{Backend: policy.Redis(c)}
		},
	}
	run := time.Now().UnixNano() // the values of this run only, on a shared server
	for name, opts := range backends {
		for _, kind := range []string{"rule", "shadow", "override"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				e := start(t, files, opts(t))
				rng := rand.New(rand.NewSource(1))
				for seq := range 60 {
					var count uint64 // theirs
					value := fmt.Sprintf("%d-%d", run, seq)
					for step := range 8 {
						var hits uint64
						switch r := rng.Intn(10); {
						case r < 3:
							hits = 0
						case r < 8:
							hits = uint64(1 + rng.Intn(3))
						case r < 9:
							hits = uint64(limit + rng.Intn(3))
						default:
							hits = math.MaxUint64
						}
						d := desc(kind, value)
						if kind == "override" {
							d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: limit, Unit: typepb.RateLimitUnit_YEAR}
						}
						d.HitsAddend = wrapperspb.UInt64(hits)
						resp := e.call(t, "d", 1, d)
						count += min(hits, math.MaxUint64-count)

						code, remaining := rlspb.RateLimitResponse_OK, uint32(0)
						if count <= limit {
							remaining = uint32(limit - count)
						} else if kind != "shadow" {
							code = rlspb.RateLimitResponse_OVER_LIMIT
						}
						st := resp.Statuses[0]
						where := fmt.Sprintf("sequence %d step %d, %d hits (count %d)", seq, step, hits, count)
						if st.Code != code || st.LimitRemaining != remaining || st.CurrentLimit.GetRequestsPerUnit() != limit {
							t.Fatalf("%s: %v remaining %d of %d; want %v remaining %d of %d", where, st.Code, st.LimitRemaining, st.CurrentLimit.GetRequestsPerUnit(), code, remaining, limit)
						}
						if rl := header(resp, "RateLimit"); !strings.Contains(rl, fmt.Sprintf(";r=%d;", remaining)) {
							t.Fatalf("%s: RateLimit %q, want r=%d", where, rl, remaining)
						}
						if p := header(resp, "RateLimit-Policy"); !strings.Contains(p, fmt.Sprintf(";q=%d;", limit)) {
							t.Fatalf("%s: RateLimit-Policy %q, want q=%d", where, p, limit)
						}
						if ra := header(resp, "Retry-After"); (code == rlspb.RateLimitResponse_OVER_LIMIT) != (ra != "") {
							t.Fatalf("%s: Retry-After %q with %v", where, ra, code)
						}
					}
				}
			})
		}
	}
}
