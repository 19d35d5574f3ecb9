// Package httplimit applies limitkit limiters to HTTP: Middleware protects a
// server per client, Transport keeps a client under an upstream's limits.
//
// Both take a Keyed limiter: a partitioned one (one limit per client IP, or
// per upstream host) over any backend, one limit for every key (Global), or
// any limiter per key (KeyedFunc: a per-key limit chained with a global
// one, say). Responses carry the IETF RateLimit header fields
// (draft-ietf-httpapi-ratelimit-headers): RateLimit-Policy ("name";q=;w=) and
// RateLimit ("name";r=;t=), and optionally the legacy X-RateLimit-* trio.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/check"
)

// KeyFunc returns the partition key of a request.
type KeyFunc func(*http.Request) string

// Keyed is a limiter that decides per key, what Middleware and Transport
// take: a *partitioned.Limiter[string] is one.
type Keyed interface {
	Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error)
	Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error)
}

// KeyedFunc is a Keyed that asks f for the limiter of each key: for a
// per-key limit chained with a global one, say,
//
//	httplimit.KeyedFunc(func(ip string) ratelimit.Limiter { return ratelimit.Chain(perIP.For(ip), global) })
//
// f runs on every request, so keep it cheap (the chain above is one small
// allocation). f returning nil is an error wrapping
// ratelimit.ErrInvalidConfig.
type KeyedFunc func(key string) ratelimit.Limiter

// Acquire is f(key).Acquire.
func (f KeyedFunc) Acquire(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	l, err := f.of(key)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	return l.Acquire(ctx, permits)
}

// Wait is f(key).Wait.
func (f KeyedFunc) Wait(ctx context.Context, key string, permits int) (ratelimit.Lease, error) {
	l, err := f.of(key)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	return l.Wait(ctx, permits)
}

func (f KeyedFunc) of(key string) (ratelimit.Limiter, error) {
	if l := f(key); !check.IsNil(l) {
		return l, nil
	}
	return nil, fmt.Errorf("%w: httplimit: the KeyedFunc returned no limiter for %q", ratelimit.ErrInvalidConfig, key)
}

// Global is the Keyed of one limiter that every key shares. Global of a nil
// limiter is nil, which Middleware and Transport refuse.
func Global(l ratelimit.Limiter) Keyed {
	if check.IsNil(l) {
		return nil
	}
	return KeyedFunc(func(string) ratelimit.Limiter { return l })
}

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
	// Policy names the policy in the RateLimit fields; "default" by default.
	Policy string
	// Window is the policy's window, for RateLimit-Policy's w= (omitted when 0).
	Window time.Duration
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
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset (seconds).
	LegacyHeaders bool
}

// Middleware returns a middleware that limits requests per Key with l. A
// concurrency limiter's lease is released when the handler returns, even if
// it panics. A limiter that cannot decide (a closed limiter, a failing
// backend) answers 503.
//
// A nil l (or a nil *partitioned.Limiter in it), a StatusCode outside
// [400, 599] or a negative MaxWait is an error wrapping
// ratelimit.ErrInvalidConfig. The middleware given a nil
// handler logs it (with the log package) and answers every request with
// 500 Internal Server Error.
func Middleware(l Keyed, o Options) (func(http.Handler) http.Handler, error) {
	if check.IsNil(l) {
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
	policy := strconv.Quote(o.Policy)
	return func(next http.Handler) http.Handler {
		if next == nil {
			log.Print("httplimit: Middleware was given a nil handler; every request will get 500 Internal Server Error")
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "no handler", http.StatusInternalServerError)
			})
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := o.Key(r)
			var lease ratelimit.Lease
			var err error
			if o.MaxWait > 0 {
				ctx, cancel := context.WithTimeout(r.Context(), o.MaxWait)
				lease, err = l.Wait(ctx, key, 1)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
					err = nil // waited MaxWait: a refusal
				}
			} else {
				lease, err = l.Acquire(r.Context(), key, 1)
			}
			if err != nil {
				http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				return
			}
			defer lease.Release()
			setHeaders(w.Header(), policy, o, lease)
			if !lease.Acquired() {
				if d, ok := lease.RetryAfter(); ok {
					w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d), 10))
				}
				o.OnRejected(w, r, lease)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// ceilSeconds rounds up to whole seconds, as delay-seconds require.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

func setHeaders(h http.Header, policy string, o Options, lease ratelimit.Lease) {
	if lease.Limit() <= 0 {
		return // NoLimit partitions: no policy to announce
	}
	p := fmt.Sprintf("%s;q=%d", policy, lease.Limit())
	if o.Window > 0 {
		p += fmt.Sprintf(";w=%d", ceilSeconds(o.Window))
	}
	remaining, reset := max(lease.Remaining(), 0), ceilSeconds(lease.ResetAfter())
	h.Set("RateLimit-Policy", p)
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", policy, remaining, reset))
	if o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(lease.Limit(), 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
}
