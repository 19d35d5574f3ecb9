package main

// Interoperability of httplimit's RateLimit fields, read by an independent
// RFC 8941 parser (github.com/dunglas/httpsfv, a complete, maintained
// implementation that passes the structured-field test suite): the fields
// that Middleware writes for every algorithm, on both backends, on grants
// and refusals, and a Transport against a real upstream that writes
// multi-member fields with that parser's encoder.

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dunglas/httpsfv"
	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/redis"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// sfMember is one parsed member of a RateLimit or RateLimit-Policy field.
type sfMember struct {
	name   string
	params map[string]int64
}

// parseField parses a field as an RFC 8941 List of Items whose values are
// Strings and whose r, t, q and w parameters are non-negative Integers, as
// draft-ietf-httpapi-ratelimit-headers-11 requires.
func parseField(t *testing.T, field string, lines []string) []sfMember {
	t.Helper()
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		t.Fatalf("%s %q: not a structured-field List: %v", field, lines, err)
	}
	var out []sfMember
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s %q: an inner list", field, lines)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%s %q: the policy name %v is not a String", field, lines, item.Value)
		}
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			switch k {
			case "r", "t", "q", "w":
				n, ok := v.(int64)
				if !ok || n < 0 || (k == "w" && n == 0) {
					t.Fatalf("%s %q: %s=%v is not a non-negative Integer", field, lines, k, v)
				}
				params[k] = n
			case "qu":
				if _, ok := v.(string); !ok {
					t.Fatalf("%s %q: qu=%v is not a String", field, lines, v)
				}
			}
		}
		out = append(out, sfMember{name, params})
	}
	return out
}

// checkResponse parses the RateLimit fields of a response and checks them
// against each other and against Retry-After.
func checkResponse(t *testing.T, h http.Header, names []string) {
	t.Helper()
	policies := parseField(t, "RateLimit-Policy", h.Values("RateLimit-Policy"))
	limits := parseField(t, "RateLimit", h.Values("RateLimit"))
	if len(limits) != len(policies) || len(limits) == 0 {
		t.Fatalf("%d RateLimit members for %d policies: %v", len(limits), len(policies), h)
	}
	for i, m := range limits {
		if m.name != policies[i].name || m.name != names[i] {
			t.Fatalf("member %d: %q in RateLimit, %q in RateLimit-Policy, want %q", i, m.name, policies[i].name, names[i])
		}
		if _, ok := m.params["r"]; !ok {
			t.Fatalf("member %d has no r: %v", i, h)
		}
		if _, ok := policies[i].params["q"]; !ok {
			t.Fatalf("policy %d has no q: %v", i, h)
		}
	}
	if ra := h.Get("Retry-After"); ra != "" {
		secs, err := strconv.ParseInt(ra, 10, 64)
		if err != nil || secs < 0 {
			t.Fatalf("Retry-After %q is not delay-seconds", ra)
		}
		refused := limits[len(limits)-1]
		if tt, ok := refused.params["t"]; ok && secs < tt {
			t.Fatalf("Retry-After %d points earlier than the end of t=%d: %v", secs, tt, h)
		}
		if refused.params["r"] != 0 {
			t.Fatalf("a refusal with r=%d: %v", refused.params["r"], h)
		}
	}
}

var fieldAlgorithms = []struct {
	name string
	cfg  ratelimit.Config
}{
	{"tokenbucket", tokenbucket.Config{Rate: 0.5, Burst: 3}},
	{"tokenbucket-interval", tokenbucket.Config{Period: 7 * time.Second, PerPeriod: 2, Burst: 3}},
	{"fixedwindow", fixedwindow.Config{Limit: 3, Window: 90 * time.Second}},
	{"slidingwindow", slidingwindow.Config{Limit: 3, Window: time.Minute, Segments: 4}},
	{"slidingwindow-weighted", slidingwindow.Config{Limit: 3, Window: time.Minute}},
	{"slidinglog", slidinglog.Config{Limit: 3, Window: time.Minute}},
	{"concurrency", concurrency.Config{Limit: 3}},
	{"longwindow", fixedwindow.Config{Limit: 3, Window: 31_000_000*time.Second + time.Microsecond}}, // whole microseconds, as Redis needs
}

// TestRateLimitFieldsParse: every field Middleware writes parses as RFC 8941,
// for every algorithm on both backends, on grants and refusals, with one
// member per policy of a route and names that need escaping.
func TestRateLimitFieldsParse(t *testing.T) {
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	defer client.Close()
	for _, a := range fieldAlgorithms {
		for _, backend := range []string{"memory", "redis"} {
			t.Run(a.name+"/"+backend, func(t *testing.T) {
				newLimiter := func(key string) ratelimit.Limiter {
					var l ratelimit.Limiter
					var err error
					if backend == "memory" {
						l, err = memory.New(a.cfg)
					} else {
						l, err = redis.New(client, t.Name()+key, a.cfg)
					}
					if err != nil {
						t.Fatal(err)
					}
					if c, ok := l.(io.Closer); ok {
						t.Cleanup(func() { c.Close() })
					}
					return l
				}
				global, route := newLimiter("global"), newLimiter("route")
				names := []string{`route "a\b", c`, "global"}
				mw, err := httplimit.Middleware(partitioned.Global(global), httplimit.Options{
					Policy: "global", Config: a.cfg, LegacyHeaders: true,
					Routes: []httplimit.Route{{Pattern: "GET /r/", Policy: httplimit.Policy{Name: names[0], Limiter: partitioned.Global(route), Config: a.cfg}}},
				})
				if err != nil {
					t.Fatal(err)
				}
				block := make(chan struct{})
				var entered atomic.Int64
				srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Query().Get("hold") != "" {
						entered.Add(1)
						<-block // a concurrency permit stays held
					}
				})))
				defer srv.Close()
				defer close(block)
				var refused, granted int
				for i := 0; i < 5; i++ {
					path := "/r/x"
					want := names
					if i == 0 {
						path, want = "/other", names[1:]
					}
					if _, ok := a.cfg.(concurrency.Config); ok && i >= 1 && i <= 3 {
						// Hold three permits on the route: the next request is refused.
						go func() {
							if resp, err := http.Get(srv.URL + path + "?hold=1"); err == nil {
								resp.Body.Close()
							}
						}()
						for deadline := time.Now().Add(5 * time.Second); entered.Load() < int64(i); time.Sleep(time.Millisecond) {
							if time.Now().After(deadline) {
								t.Fatalf("request %d never reached the handler", i)
							}
						}
						continue
					}
					resp, err := http.Get(srv.URL + path)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if list, _ := httpsfv.UnmarshalList(resp.Header.Values("RateLimit")); i > 0 && resp.StatusCode == 429 && len(list) == 1 {
						// refused by the route: the global policy was not asked
						want = names[:1]
					}
					checkResponse(t, resp.Header, want)
					if resp.StatusCode == 429 {
						refused++
					} else {
						granted++
					}
				}
				if refused == 0 || granted == 0 {
					t.Fatalf("%d granted, %d refused: want both kinds checked", granted, refused)
				}
			})
		}
	}
}

// TestTransportReadsEncodedFields: an upstream that writes multi-member
// RateLimit fields with an RFC 8941 encoder (names with commas and quotes,
// members on several lines) pauses the Transport for the longest
// exhausted policy.
func TestTransportReadsEncodedFields(t *testing.T) {
	member := func(name string, params ...any) httpsfv.Item {
		it := httpsfv.NewItem(name)
		for i := 0; i < len(params); i += 2 {
			it.Params.Add(params[i].(string), params[i+1])
		}
		return it
	}
	for _, c := range []struct {
		name          string
		limit, policy []httpsfv.List
		want          time.Duration
	}{
		{"burst then daily", []httpsfv.List{{member("burst", "r", int64(5), "t", int64(1)), member("daily", "r", int64(0), "t", int64(30))}}, nil, 30 * time.Second},
		{"names with commas, two lines", []httpsfv.List{{member(`a, "b"`, "r", int64(0), "t", int64(20))}, {member("c,d", "r", int64(0), "t", int64(40), "x", true)}}, nil, 40 * time.Second},
		{"t from the policy", []httpsfv.List{{member("hourly", "r", int64(0))}}, []httpsfv.List{{member("hourly", "q", int64(100), "w", int64(50))}}, 50 * time.Second},
	} {
		hdr := http.Header{}
		for _, l := range c.limit {
			v, err := httpsfv.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			hdr.Add("RateLimit", v)
		}
		for _, l := range c.policy {
			v, err := httpsfv.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			hdr.Add("RateLimit-Policy", v)
		}
		var hits atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			for k, v := range hdr {
				w.Header()[k] = v
			}
		}))
		l, err := memory.New(fixedwindow.Config{Limit: 100, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tr := &httplimit.Transport{Limiter: partitioned.Global(l), FailFast: true}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, err = tr.RoundTrip(httptest.NewRequest("GET", srv.URL, nil))
		var rl *httplimit.RateLimitedError
		if !errors.As(err, &rl) || hits.Load() != 1 {
			t.Errorf("%s: %v, hits %d; want a local refusal", c.name, err, hits.Load())
		} else if d, _ := rl.RetryAfter(); d > c.want || d < c.want-2*time.Second {
			t.Errorf("%s: paused %v, want %v", c.name, d, c.want)
		}
		srv.Close()
		l.Close()
	}
}
