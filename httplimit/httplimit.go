// Package httplimit applies limitkit limiters to HTTP: Middleware protects a
// server per client, Transport keeps a client under an upstream's limits.
//
// Both take a ratelimit.Keyed: a partitioned limiter (one limit per client
// IP, or per upstream host) over any backend, one limit for every key
// (partitioned.Global), or any limiter per key (partitioned.Func: a
// per-key limit chained with a global one, say). Middleware also applies per-route policies (a login limit and
// an API limit under a global one). Responses carry the IETF RateLimit
// header fields of draft-ietf-httpapi-ratelimit-headers-11:
// RateLimit-Policy ("name";q=;w=) and RateLimit ("name";r=;t=, t being the
// time until the quota next grows), and optionally the legacy
// X-RateLimit-* trio.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/internal/check"
)

// KeyFunc returns the partition key of a request.
type KeyFunc func(*http.Request) string

// ClientIP returns the key of the client's IP address: the host of
// RemoteAddr, unless it is one of the trusted proxies, in which case the
// Forwarded (RFC 7239) or else X-Forwarded-For header is read from the right,
// skipping trusted proxies, and the first address not trusted is the client.
// With no trusted proxies the headers are ignored: anyone can forge them.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a.Unmap()) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) string {
		remote := hostOf(r.RemoteAddr)
		addr, err := netip.ParseAddr(remote)
		if err != nil || !isTrusted(addr) {
			return remote
		}
		hops := forwardedFor(r.Header)
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(hostOf(hops[i]))
			if err != nil {
				return remote // a malformed hop: do not trust what lies beyond it
			}
			if !isTrusted(a) {
				return a.Unmap().String()
			}
		}
		if len(hops) > 0 {
			return hostOf(hops[0])
		}
		return remote
	}
}

// forwardedFor lists the hops of Forwarded's for= parameters, or else of
// X-Forwarded-For, in order.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, line := range h.Values("Forwarded") {
		for _, elem := range strings.Split(line, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					hops = append(hops, strings.Trim(v, `"`))
				}
			}
		}
	}
	if len(hops) > 0 {
		return hops
	}
	for _, line := range h.Values("X-Forwarded-For") {
		for _, hop := range strings.Split(line, ",") {
			if hop = strings.TrimSpace(hop); hop != "" {
				hops = append(hops, hop)
			}
		}
	}
	return hops
}

// hostOf strips a port and IPv6 brackets: "[::1]:80" -> "::1".
func hostOf(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return strings.Trim(s, "[]")
}

// Options configures Middleware. The zero value is usable.
type Options struct {
	// Key maps a request to its partition; ClientIP() by default.
	Key KeyFunc
	// Policy names the policy in the RateLimit fields; "default" by
	// default. It must be printable ASCII (see ValidPolicyName).
	Policy string
	// Window is the policy's window, for RateLimit-Policy's w; by default
	// Config's (a token bucket's: the time to fill it), omitted without one.
	Window time.Duration
	// Config is the configuration of the limiter's partitions (a
	// tokenbucket.Config, fixedwindow.Config, ...), for RateLimit-Policy's
	// w and qu. The RateLimit field's t on a grant is the lease's, for the
	// configuration its limiter applied (every limiter of this module but
	// FromRate tells it); Config gives it for a limiter of one's own whose
	// leases do not. A limiter that is Configured (policy.Keyed) reports
	// its own configuration, which is used instead.
	Config ratelimit.Config
	// Clock reads the time where t needs it (the end of an epoch-aligned
	// window that has no grant yet); the system clock when nil. Give it the
	// limiter's clock.
	Clock ratelimit.Clock
	// Routes adds per-route policies: a request that matches a route's
	// pattern is limited by the route's policy first, and then by the
	// middleware's own. The most specific pattern wins, as in ServeMux.
	Routes []Route
	// StatusCode answers refused requests (with the default OnRejected);
	// 429 by default. It must be a client or server error, in [400, 599].
	StatusCode int
	// OnRejected writes the response of a refused request after the headers
	// (RateLimit, Retry-After) are set; by default a short text body.
	OnRejected func(w http.ResponseWriter, r *http.Request, lease ratelimit.Lease)
	// MaxWait > 0 makes requests wait in the limiter's queue for up to
	// MaxWait (and the request's own context) instead of being refused at
	// once; zero means no waiting. It must not be negative.
	MaxWait time.Duration
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset (seconds
	// until the quota is fully reset), of the policy with the least
	// remaining quota.
	LegacyHeaders bool
	// Cost, when set, is what a request reserves of the limiter: an
	// estimate of its cost in permits (the tokens a language model may
	// use, the bytes of a transfer), where each request takes 1 without
	// it. The handler settles the actual cost, once it knows it, with
	// Settle on the request's context. See Settle.
	Cost func(*http.Request) int
}

// Policy is a named limit for Routes: its own limiter, key, and the
// figures of its RateLimit fields, as in Options.
type Policy struct {
	Name    string          // required, printable ASCII (see ValidPolicyName)
	Limiter ratelimit.Keyed // required
	Key     KeyFunc
	Window  time.Duration
	Config  ratelimit.Config
	Cost    func(*http.Request) int // a reservation per request, settled by the handler (see Options.Cost)
}

// Route applies Policy to the requests that match Pattern, a
// net/http.ServeMux pattern ("POST /login", "/api/", "GET /items/{id}",
// "example.com/"). Patterns follow ServeMux's rules: two patterns that
// conflict are an error.
//
// Policies are more policies of the route, applied after Policy in order:
// a plan of 10 requests a second, 1,000 a day and 10,000 a month (calendar
// quotas) is three. Each decides in turn, as the route's policy and the
// middleware's own do (a refusal gives back what the ones before it
// granted), and each has its own member in the RateLimit fields, where a
// Chain of their limiters would show only its tightest member. Their names
// must differ from one another.
type Route struct {
	Pattern  string
	Policy   Policy
	Policies []Policy
}

// Configured is a ratelimit.Keyed that reports the configuration its
// limiters decide by now: policy.Keyed does, following the live changes of
// its policy. The middleware then reads the fields that depend on the
// configuration (RateLimit's t on a grant, RateLimit-Policy's w and qu)
// from it at each request, rather than from Options.Config (or a Route
// Policy's Config), which a live change would leave stale (t is the
// lease's anyway, for a limiter of this module). Config returns nil when
// it does not know.
type Configured interface {
	Config() ratelimit.Config
}

// policy is a validated Policy.
type policy struct {
	name   string // as a structured-field String
	l      ratelimit.Keyed
	key    KeyFunc
	window time.Duration // Policy.Window: 0 for the configuration's
	cfg    ratelimit.Config
	w      time.Duration // the w of cfg and window
	live   Configured    // l, when it reports its configuration
	cost   func(*http.Request) int
}

// figures returns the configuration of p's limiters now, and the w of its
// RateLimit-Policy item (0: omitted).
func (p *policy) figures() (ratelimit.Config, time.Duration) {
	if p.live != nil {
		if c := p.live.Config(); !check.IsNil(c) {
			c = check.Value(c)
			return c, policyWindow(c, p.window)
		}
	}
	return p.cfg, p.w
}

func newPolicy(p Policy, defaultKey KeyFunc) (policy, error) {
	if check.IsNil(p.Limiter) {
		return policy{}, fmt.Errorf("%w: httplimit: policy %q needs a limiter, got nil", ratelimit.ErrInvalidConfig, p.Name)
	}
	if err := ValidPolicyName(p.Name); err != nil {
		return policy{}, err
	}
	if p.Window < 0 {
		return policy{}, fmt.Errorf("%w: httplimit: policy %q: Window must not be negative, got %v", ratelimit.ErrInvalidConfig, p.Name, p.Window)
	}
	if p.Config != nil {
		if check.IsNil(p.Config) {
			return policy{}, fmt.Errorf("%w: httplimit: policy %q: Config is a nil %T", ratelimit.ErrInvalidConfig, p.Name, p.Config)
		}
		if err := p.Config.Validate(); err != nil {
			return policy{}, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
		}
		p.Config = check.Value(p.Config) // the fields are read off the value types
	}
	if p.Key == nil {
		p.Key = defaultKey
	}
	live, _ := p.Limiter.(Configured)
	return policy{name: sfString(p.Name), l: p.Limiter, key: p.Key, window: p.Window, cfg: p.Config,
		w: policyWindow(p.Config, p.Window), live: live, cost: p.Cost}, nil
}

// routeIndex is the marker handler of route i in the routing mux.
type routeIndex int

func (routeIndex) ServeHTTP(http.ResponseWriter, *http.Request) {}

// router finds the route of a request with a ServeMux of markers.
type router struct {
	mux      *http.ServeMux
	policies [][]policy // each route's, in order
}

func newRouter(routes []Route, defaultKey KeyFunc) (_ *router, err error) {
	if len(routes) == 0 {
		return nil, nil
	}
	rt := &router{mux: http.NewServeMux()}
	for i, r := range routes {
		var ps []policy
		for _, rp := range append([]Policy{r.Policy}, r.Policies...) {
			p, err := newPolicy(rp, defaultKey)
			if err != nil {
				return nil, fmt.Errorf("httplimit: route %q: %w", r.Pattern, err)
			}
			for _, q := range ps {
				if q.name == p.name {
					return nil, fmt.Errorf("%w: httplimit: route %q: two policies are named %q", ratelimit.ErrInvalidConfig, r.Pattern, rp.Name)
				}
			}
			ps = append(ps, p)
		}
		if err := register(rt.mux, r.Pattern, routeIndex(i)); err != nil {
			return nil, err
		}
		rt.policies = append(rt.policies, ps)
	}
	return rt, nil
}

// register is mux.Handle, with its panic on a bad pattern as an error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: httplimit: route %q: %v", ratelimit.ErrInvalidConfig, pattern, r)
		}
	}()
	if pattern == "" {
		return fmt.Errorf("%w: httplimit: a route needs a pattern", ratelimit.ErrInvalidConfig)
	}
	mux.Handle(pattern, h)
	return nil
}

// route returns the policies of r's route; none when r has no route.
func (rt *router) route(r *http.Request) []policy {
	if rt == nil {
		return nil
	}
	if h, _ := rt.mux.Handler(r); h != nil {
		if i, ok := h.(routeIndex); ok {
			return rt.policies[i]
		}
	}
	return nil
}

// Middleware returns a middleware that limits requests per Key with l, and
// with the policies of their route (Options.Routes) before that, in order.
// A refusal by a route's policy spends nothing of the policies after it
// (l's included); a refusal by a later one gives back what the policies
// before it granted when their limiters can refund the key's grant
// (For(key), then control.Refund: a partitioned limiter, Global and Func of
// memory or redis limiters), and otherwise leaves it spent. A concurrency
// limiter's lease is released
// when the handler returns, even if it panics. A limiter that cannot
// decide (a closed limiter, a failing backend) answers 503; a request
// whose Cost exceeds a policy's capacity (it could never be granted)
// answers 413 Content Too Large, and a negative Cost 500.
//
// Every response carries the fields of draft-ietf-httpapi-ratelimit-headers-11,
// one list member per policy that decided the request (the route's, then
// l's), a calendar quota's t being the time to its period's end: RateLimit-Policy ("name";q=limit;w=window) and RateLimit
// ("name";r=remaining;t=seconds), where t is the effective window: the
// time until the available quota next grows (the next token of a bucket,
// the end of a fixed window), rounded up. With a Cost, a request reserves
// its estimate, and the handler settles its actual cost (Settle): the
// request's RateLimit members show the reservation's figures, the next
// request's the settled ones. On a refusal t is the lease's
// RetryAfter, and Retry-After is the same figure, so it never points
// earlier than the end of t. On a grant t is the lease's (a limiter of
// one's own whose leases do not tell it needs Options.Config). A
// concurrency policy whose configuration is known (Options.Config, or a
// limiter that reports its own) has qu="concurrent-requests" and no t.
//
// l may be nil when Routes are given: only routed requests are limited.
// Otherwise a nil l (or a nil *partitioned.Limiter in it), a policy name
// that is not printable ASCII, a route whose pattern ServeMux rejects or
// whose policy has no limiter, a StatusCode outside [400, 599] or a
// negative MaxWait or Window is an error wrapping
// ratelimit.ErrInvalidConfig. The middleware given a nil
// handler logs it (with the log package) and answers every request with
// 500 Internal Server Error.
func Middleware(l ratelimit.Keyed, o Options) (func(http.Handler) http.Handler, error) {
	if check.IsNil(l) && len(o.Routes) == 0 {
		return nil, fmt.Errorf("%w: httplimit: Middleware needs a limiter, got nil", ratelimit.ErrInvalidConfig)
	}
	if o.StatusCode != 0 && (o.StatusCode < 400 || o.StatusCode > 599) {
		return nil, fmt.Errorf("%w: httplimit: Options.StatusCode must be in [400, 599], got %d", ratelimit.ErrInvalidConfig, o.StatusCode)
	}
	if o.MaxWait < 0 {
		return nil, fmt.Errorf("%w: httplimit: Options.MaxWait must not be negative, got %v", ratelimit.ErrInvalidConfig, o.MaxWait)
	}
	if o.Key == nil {
		o.Key = ClientIP()
	}
	if o.Policy == "" {
		o.Policy = "default"
	}
	if o.StatusCode == 0 {
		o.StatusCode = http.StatusTooManyRequests
	}
	if o.OnRejected == nil {
		o.OnRejected = func(w http.ResponseWriter, _ *http.Request, _ ratelimit.Lease) {
			http.Error(w, "rate limit exceeded", o.StatusCode)
		}
	}
	var global *policy
	if !check.IsNil(l) {
		p, err := newPolicy(Policy{Name: o.Policy, Limiter: l, Key: o.Key, Window: o.Window, Config: o.Config, Cost: o.Cost}, o.Key)
		if err != nil {
			return nil, err
		}
		global = &p
	}
	routes, err := newRouter(o.Routes, o.Key)
	if err != nil {
		return nil, err
	}
	m := &middleware{o: o, global: global, routes: routes}
	return func(next http.Handler) http.Handler {
		if next == nil {
			log.Print("httplimit: Middleware was given a nil handler; every request will get 500 Internal Server Error")
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "no handler", http.StatusInternalServerError)
			})
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	o      Options
	global *policy
	routes *router
}

// decided is a policy's lease for a request, on key.
type decided struct {
	p     *policy
	key   string
	lease ratelimit.Lease
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var buf [4]decided
	leases := buf[:0]
	defer func() {
		for _, d := range leases {
			d.lease.Release()
		}
	}()
	route := m.routes.route(r)
	for i := 0; i <= len(route); i++ { // the route's policies, then the middleware's
		p := m.global
		if i < len(route) {
			p = &route[i]
		}
		if p == nil {
			continue
		}
		key := p.key(r)
		lease, err := m.acquire(r, p, key)
		if err != nil || !lease.Acquired() {
			refund(r.Context(), leases) // the route's grant: nothing is spent for a refused request
		}
		if err != nil {
			failed(w, p, err)
			return
		}
		leases = append(leases, decided{p, key, lease})
		if !lease.Acquired() {
			break
		}
	}
	if len(leases) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	last := leases[len(leases)-1].lease
	m.setHeaders(w.Header(), leases)
	if !last.Acquired() {
		if d, ok := last.RetryAfter(); ok {
			w.Header().Set("Retry-After", strconv.FormatInt(check.CeilSeconds(d), 10))
		}
		m.o.OnRejected(w, r, last)
		return
	}
	next.ServeHTTP(w, withSettlement(r, leases))
}

// refund gives back the grants of ds, of a request a later policy
// refused: to the key's limiter (For, then control.Refund; its error is
// dropped: the grant is then kept, as a limiter without Refund keeps it);
// the deferred Release
// gives a concurrency lease back in any case. A refunded policy's lease
// is replaced by a status check's (permits 0, which takes nothing), so its
// RateLimit member tells what is left after the refund.
func refund(ctx context.Context, ds []decided) {
	ctx = context.WithoutCancel(ctx)
	for i, d := range ds {
		f, ok := d.p.l.(interface {
			For(string) ratelimit.Limiter
		})
		grant, permits := d.lease, 1
		if g, n, reserved := d.lease.Reservation(); reserved {
			grant, permits = g, n
		}
		if !ok || !grant.Acquired() || control.Refund(ctx, f.For(d.key), grant, permits) != nil {
			continue
		}
		d.lease.Release() // a concurrency grant: already given back; once only
		if now, err := d.p.l.Acquire(ctx, d.key, 0); err == nil {
			ds[i].lease = now
		}
	}
}

// acquire takes a request's permits of p for key: 1, or its Cost, which
// the grant reserves (a lease to settle).
func (m *middleware) acquire(r *http.Request, p *policy, key string) (ratelimit.Lease, error) {
	permits := 1
	if p.cost != nil {
		permits = p.cost(r)
	}
	var lease ratelimit.Lease
	var err error
	if m.o.MaxWait <= 0 {
		lease, err = p.l.Acquire(r.Context(), key, permits)
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), m.o.MaxWait)
		lease, err = p.l.Wait(ctx, key, permits)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			// Waited MaxWait: asked once more without waiting, for a
			// refusal's figures (Retry-After, the policy's member), or
			// a grant of the permits that came just then.
			lease, err = p.l.Acquire(r.Context(), key, permits)
		}
	}
	if p.cost != nil && err == nil {
		lease = lease.Reserve(permits)
	}
	return lease, err
}

func (m *middleware) now() time.Time {
	if m.o.Clock != nil {
		return m.o.Clock.Now()
	}
	return time.Now()
}

// setHeaders writes the RateLimit fields of the decided policies.
func (m *middleware) setHeaders(h http.Header, leases []decided) {
	var pol, lim []byte
	var least *ratelimit.Lease
	now := m.now()
	for i := range leases {
		d := &leases[i]
		lease := d.lease
		if lease.Limit() <= 0 {
			continue // NoLimit partitions: no policy to announce
		}
		if len(pol) > 0 {
			pol = append(pol, ", "...)
			lim = append(lim, ", "...)
		}
		cfg, window := d.p.figures()
		pol, lim = appendMembers(pol, lim, d.p.name, cfg, window, lease, now)
		if least == nil || lease.Remaining() < least.Remaining() || !lease.Acquired() {
			least = &d.lease
		}
	}
	if len(pol) == 0 {
		return
	}
	h.Set("RateLimit-Policy", string(pol))
	h.Set("RateLimit", string(lim))
	if m.o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(least.Limit(), 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(least.Remaining(), 0), 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(check.CeilSeconds(least.ResetAfter()), 10))
	}
}
