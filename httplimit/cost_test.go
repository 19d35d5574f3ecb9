package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// costOf reads a request's cost from its X-Cost header.
func costOf(r *http.Request) int {
	n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
	return n
}

// settling answers after settling its request at the X-Used header's
// cost (none when absent), keeping Settle's error in *errp.
func settling(errp *atomic.Value) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Used"); u != "" {
			n, _ := strconv.Atoi(u)
			if err := httplimit.Settle(r.Context(), n); err != nil {
				errp.Store(err)
			}
		}
	})
}

func costly(h http.Handler, cost, used string) *httptest.ResponseRecorder {
	hdr := http.Header{"X-Cost": {cost}}
	if used != "" {
		hdr.Set("X-Used", used)
	}
	return serve(h, "192.0.2.1:1", hdr)
}

// A request reserves its Cost; the handler settles the usage, and the
// next response shows the settled figures: less gives back, more is a
// debt that the next requests wait for, with an exact Retry-After.
func TestCostSettled(t *testing.T) {
	clock := ratelimittest.NewClock()
	var serr atomic.Value
	h := middleware(t, perKey(t, tokenbucket.Config{Rate: 10, Burst: 100}, clock),
		httplimit.Options{Cost: costOf, Clock: clock}, settling(&serr))

	steps := []struct {
		cost, used string
		code       int
		limit      string // the RateLimit field
		retry      string
	}{
		{"60", "20", 200, `"default";r=40;t=1`, ""}, // reserved 60: 40 left; 40 came back
		{"10", "", 200, `"default";r=70;t=1`, ""},   // 80 before it: the settlement shows
		{"70", "140", 200, `"default";r=0;t=1`, ""}, // 70 reserved, 140 used: 70 of debt
		{"1", "", 429, `"default";r=0;t=8`, "8"},    // 71 tokens at 10/s: 7.1s
		{"0", "", 429, `"default";r=0;t=8`, "8"},    // a status check is refused too
		{"200", "", 413, "", ""},                    // more than the burst: never
		{"-1", "", 500, "", ""},                     // the Cost function's fault
	}
	for i, s := range steps {
		w := costly(h, s.cost, s.used)
		if w.Code != s.code || w.Header().Get("RateLimit") != s.limit || w.Header().Get("Retry-After") != s.retry {
			t.Fatalf("step %d (cost %s, used %s): %d %q Retry-After %q; want %d %q %q", i+1, s.cost, s.used,
				w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), s.code, s.limit, s.retry)
		}
		if err, _ := serr.Load().(error); err != nil {
			t.Fatalf("step %d: Settle: %v", i+1, err)
		}
	}
	clock.Advance(7100*time.Millisecond - time.Nanosecond)
	if w := costly(h, "1", ""); w.Code != 429 {
		t.Fatalf("1ns before the debt is paid: %d, want 429", w.Code)
	}
	clock.Advance(time.Nanosecond)
	if w := costly(h, "1", ""); w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=0;t=1` {
		t.Fatalf("once the debt is paid: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
}

// Settle's errors: a request that reserved nothing, a second settlement, a
// negative cost; none changes what the next request is told.
func TestCostSettleErrors(t *testing.T) {
	clock := ratelimittest.NewClock()
	var errs []error
	h := func(o httplimit.Options) http.Handler {
		return middleware(t, perKey(t, fixedwindow.Config{Limit: 10, Window: time.Minute}, clock), o,
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				errs = append(errs, httplimit.Settle(r.Context(), -1), httplimit.Settle(r.Context(), 4),
					httplimit.Settle(r.Context(), 9))
			}))
	}
	plain := h(httplimit.Options{Clock: clock})
	serve(plain, "192.0.2.1:1", nil)
	if len(errs) != 3 || !errors.Is(errs[1], ratelimit.ErrInvalidLease) {
		t.Fatalf("Settle without a Cost: %v, want ErrInvalidLease", errs)
	}
	errs = nil
	costs := h(httplimit.Options{Clock: clock, Cost: costOf})
	costly(costs, "6", "")
	if !errors.Is(errs[0], ratelimit.ErrInvalidPermits) || errs[1] != nil || !errors.Is(errs[2], ratelimit.ErrInvalidLease) {
		t.Fatalf("Settle(-1), Settle(4), Settle(9) = %v, want ErrInvalidPermits, nil, ErrInvalidLease", errs)
	}
	if w := costly(costs, "0", ""); w.Header().Get("RateLimit") != `"default";r=6;t=40` {
		t.Fatalf("after settling 6 at 4: %q, want r=6 (2 back, the refused calls changing nothing)", w.Header().Get("RateLimit"))
	}
	if err := httplimit.Settle(context.Background(), 1); !errors.Is(err, ratelimit.ErrInvalidLease) {
		t.Fatalf("Settle on a context the middleware did not give: %v", err)
	}
}

// A route's reservation is given back whole when the middleware's own
// limiter refuses the request; with both reserving, one Settle settles
// both.
func TestCostRoutes(t *testing.T) {
	clock := ratelimittest.NewClock()
	route := perKey(t, fixedwindow.Config{Limit: 100, Window: time.Minute}, clock)
	global := perKey(t, fixedwindow.Config{Limit: 10, Window: time.Minute}, clock)
	var serr atomic.Value
	h := middleware(t, global, httplimit.Options{Clock: clock, Cost: costOf, Routes: []httplimit.Route{{
		Pattern: "/", Policy: httplimit.Policy{Name: "route", Limiter: route, Cost: costOf},
	}}}, settling(&serr))
	if w := costly(h, "8", "3"); w.Code != 200 || w.Header().Get("RateLimit") != `"route";r=92;t=40, "default";r=2;t=40` {
		t.Fatalf("first: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	// Both settled at 3: 97 and 7 left. 9 is refused by the global limit,
	// and the route's reservation of 9 comes back whole.
	if w := costly(h, "9", ""); w.Code != 429 || w.Header().Get("RateLimit") != `"route";r=97;t=40, "default";r=7;t=40` {
		t.Fatalf("refused by the global limit: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	if err, _ := serr.Load().(error); err != nil {
		t.Fatal(err)
	}
}
