package httplimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// ErrRateLimited is matched (errors.Is) by the errors Transport returns for
// requests it does not send; the error is a *RateLimitedError.
var ErrRateLimited = errors.New("httplimit: rate limited")

// RateLimitedError says why a request was not sent and when to retry.
type RateLimitedError struct {
	Host       string // the request's key (its URL's host by default)
	Reason     ratelimit.Reason
	retryAfter time.Duration // negative: unknown
}

// RetryAfter is how long until the request could be sent, as a refused
// lease's RetryAfter says: ok is false when that is not known (a
// concurrency limit).
func (e *RateLimitedError) RetryAfter() (d time.Duration, ok bool) {
	return max(e.retryAfter, 0), e.retryAfter >= 0
}

func (e *RateLimitedError) Error() string {
	if d, ok := e.RetryAfter(); ok {
		return fmt.Sprintf("httplimit: %s: %v, retry after %v", e.Host, e.Reason, d)
	}
	return fmt.Sprintf("httplimit: %s: %v", e.Host, e.Reason)
}

// Is makes errors.Is(err, ErrRateLimited) hold.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// Transport is an http.RoundTripper that throttles outbound requests per
// upstream: it waits for (or, with FailFast, asks for) a permit before
// sending. A refused request is not sent, and its body is closed unread.
//
// It learns from the upstream: a 429 or 503 response with Retry-After
// (delay-seconds or an HTTP-date), or an exhausted policy in the RateLimit
// fields of any response (any member with r=0, for its t, or else its
// policy's w in RateLimit-Policy; any RateLimit-Policy member with q=0, for
// its w), pauses that partition for the longest of those times (at most
// MaxPause), so the next requests wait here instead of hitting the server.
//
// A concurrency limiter's permit is held until the response body is closed
// (or the round trip fails): never longer and never shorter.
//
// A Transport without a Limiter (or a nil *Transport) sends nothing:
// RoundTrip returns an error wrapping ratelimit.ErrInvalidConfig.
type Transport struct {
	// Base sends the requests; http.DefaultTransport when nil.
	Base http.RoundTripper
	// Limiter decides per key (a partitioned limiter: one limit per
	// upstream host, say; see ratelimit.Keyed). Required: RoundTrip fails
	// without it.
	Limiter ratelimit.Keyed
	// Key maps a request to its partition; the request's host by default.
	Key KeyFunc
	// FailFast refuses at once instead of waiting (within the request's context).
	FailFast bool
	// Synthetic429 makes refusals a 429 response with Retry-After instead of
	// an error, for callers that expect responses.
	Synthetic429 bool
	// Clock reads the time for pauses learnt from upstreams; system clock when nil.
	Clock ratelimit.Clock
	// MaxPause bounds the pause one response can set (a longer one is
	// cut to it): a wrong or hostile upstream cannot stall the requests
	// that have no deadline for longer. Zero means 366 days (a yearly quota's
	// longest wait).
	MaxPause time.Duration

	pauses base.Pauses
}

func (t *Transport) now() time.Time {
	if t.Clock != nil {
		return t.Clock.Now()
	}
	return time.Now()
}

// RoundTrip implements http.RoundTripper. Like every RoundTripper it closes
// the request's body, also on errors. A nil request or URL, or a Base that
// returns neither a response nor an error, is an error, as in net/http; a
// response that Base returns without a Body gets http.NoBody.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		closeBody(req)
		return nil, errors.New("httplimit: nil Request or Request.URL")
	}
	if t == nil || check.IsNil(t.Limiter) {
		closeBody(req)
		return nil, fmt.Errorf("%w: httplimit: Transport.Limiter is nil", ratelimit.ErrInvalidConfig)
	}
	key := req.URL.Host
	if t.Key != nil {
		key = t.Key(req)
	}
	if wait, refused, err := t.pauses.Wait(req.Context(), t.Clock, key, t.FailFast); refused || err != nil {
		if refused {
			err = ErrRateLimited
		}
		return t.refuse(req, key, wait, ratelimit.ReasonLimit, err)
	}
	var lease ratelimit.Lease
	var err error
	if t.FailFast {
		lease, err = t.Limiter.Acquire(req.Context(), key, 1)
	} else {
		lease, err = t.Limiter.Wait(req.Context(), key, 1)
	}
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if !lease.Acquired() {
		d, ok := lease.RetryAfter()
		if !ok {
			d = -1
		}
		return t.refuse(req, key, d, lease.Reason(), nil)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		lease.Release()
		return nil, err
	}
	if resp == nil {
		lease.Release()
		return nil, fmt.Errorf("httplimit: the Base RoundTripper (%T) returned a nil *Response with a nil error", base)
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	t.learn(key, resp)
	resp.Body = &releasingBody{ReadCloser: resp.Body, lease: lease}
	return resp, nil
}

// refuse answers a request that is not sent, which could be in d (negative:
// unknown): an error, or a synthetic 429.
func (t *Transport) refuse(req *http.Request, key string, d time.Duration, reason ratelimit.Reason, cause error) (*http.Response, error) {
	closeBody(req)
	if cause != nil && !errors.Is(cause, ErrRateLimited) {
		return nil, cause // the request's context ended
	}
	if t.Synthetic429 {
		h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		if d >= 0 {
			h.Set("Retry-After", strconv.FormatInt(check.CeilSeconds(d), 10))
		}
		body := "rate limited by the client\n"
		return &http.Response{
			Status: "429 Too Many Requests", StatusCode: http.StatusTooManyRequests,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Request: req,
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)),
		}, nil
	}
	return nil, &RateLimitedError{Host: key, Reason: reason, retryAfter: d}
}

func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		req.Body.Close()
	}
}

// learn pauses key when the upstream says it is limited: a 429 or 503
// with Retry-After, or any exhausted policy in the RateLimit and
// RateLimit-Policy fields, for the longest of the times they give.
func (t *Transport) learn(key string, resp *http.Response) {
	now := t.now()
	var until time.Time
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		until = retryAfter(resp.Header.Get("Retry-After"), now)
	}
	if d := exhausted(resp.Header); d > 0 {
		if u := now.Add(d); u.After(until) {
			until = u
		}
	}
	if most := now.Add(base.MaxPause(t.MaxPause)); until.After(most) {
		until = most
	}
	if until.After(now) {
		t.pauses.Pause(key, until, now)
	}
}

// maxPause bounds a pause learnt from an upstream, so that adding it to
// the present does not overflow: the longest window a limiter of this
// module accepts.
const maxPause = check.MaxDuration

// seconds converts delay-seconds to a Duration, saturating at maxPause.
func seconds(s int64) time.Duration {
	if s > int64(maxPause/time.Second) {
		return maxPause
	}
	return time.Duration(s) * time.Second
}

// exhausted reads every member of the RateLimit and RateLimit-Policy
// fields (all their lines, as one List) and returns the longest pause they
// ask for: t of a RateLimit member with r=0 (or, without t, the w of its
// policy in RateLimit-Policy), and w of a policy with q=0. Members after a
// syntax error are ignored, the ones before it are honoured.
func exhausted(h http.Header) time.Duration {
	limits, _ := parseList(strings.Join(h.Values("RateLimit"), ","))
	var policies []member
	if lines := h.Values("RateLimit-Policy"); len(lines) > 0 {
		policies, _ = parseList(strings.Join(lines, ","))
	}
	window := func(name string) (int64, bool) {
		for _, p := range policies {
			if w, ok := p.params["w"]; ok && p.name == name {
				return w, true
			}
		}
		return 0, false
	}
	var longest time.Duration
	for _, m := range limits {
		if r, ok := m.params["r"]; !ok || r > 0 {
			continue
		}
		t, ok := m.params["t"]
		if !ok {
			t, ok = window(m.name)
		}
		if ok && t > 0 {
			longest = max(longest, seconds(t))
		}
	}
	for _, p := range policies {
		if q, ok := p.params["q"]; ok && q == 0 {
			if w := p.params["w"]; w > 0 {
				longest = max(longest, seconds(w))
			}
		}
	}
	return longest
}

// retryAfter parses Retry-After: delay-seconds or an HTTP-date.
func retryAfter(v string, now time.Time) time.Time {
	if v == "" {
		return time.Time{}
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s >= 0 {
		return now.Add(seconds(s))
	}
	if s := strings.TrimSpace(v); len(s) > 0 && s[0] >= '0' && s[0] <= '9' && strings.Trim(s, "0123456789") == "" {
		return now.Add(maxPause) // more seconds than an int64 holds
	}
	if at, err := http.ParseTime(v); err == nil {
		return at
	}
	return time.Time{}
}

// releasingBody releases the lease when the body is closed, once.
type releasingBody struct {
	io.ReadCloser
	lease ratelimit.Lease
	once  sync.Once
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.lease.Release)
	return err
}
