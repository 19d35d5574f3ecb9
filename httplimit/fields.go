package httplimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
)

// ValidPolicyName reports whether name can name a policy in the RateLimit
// fields: a non-empty structured-field String (RFC 8941 section 3.3.3),
// that is printable ASCII, 0x20 to 0x7E. Tabs, control characters and
// non-ASCII text (say "café") cannot be sent in a String, so Middleware
// refuses them rather than send a field that parsers reject.
func ValidPolicyName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: httplimit: a policy name must not be empty", ratelimit.ErrInvalidConfig)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: httplimit: policy name %q: byte %#x at %d is not printable ASCII, which a structured-field String requires", ratelimit.ErrInvalidConfig, name, c, i)
		}
	}
	return nil
}

// sfString is the structured-field String of s, which ValidPolicyName
// accepts: in double quotes, with '"' and '\' escaped.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// effectiveWindow is the RateLimit field's t for lease, as
// draft-ietf-httpapi-ratelimit-headers-11 defines it: the time within which
// the client can use no more than the available quota, that is the time
// until the available quota next grows. ok is false when it is not known,
// and t is then omitted (the draft makes it optional).
//
// A refusal's t is its RetryAfter (the time until one permit is available),
// so Retry-After, the same figure rounded up the same way, never points
// earlier than the end of t. A grant's t is what the lease says, for the
// configuration its limiter applied (every limiter of this module says it,
// followed through a reconfiguration); for a limiter of one's own, whose
// leases do not, it comes from cfg, the policy's Config, when there is one.
// Each algorithm's package says what it is (its descriptor's Grows): a
// token bucket's next token or refill, a fixed window's end, a segmented
// window's next segment; not known for a weighted sliding window, a
// sliding log that holds grants, or a concurrency limit.
//
// Window alignment reads now: the limiter's clock for memory limiters,
// Redis's for redis ones; the two differ only by clock skew.
func effectiveWindow(cfg ratelimit.Config, lease ratelimit.Lease, now time.Time) (time.Duration, bool) {
	if !lease.Acquired() {
		return lease.RetryAfter()
	}
	if lease.Outcome().Grows != nil {
		return lease.GrowsAfter(now)
	}
	return algo.GrowsAfter(cfg, lease.Remaining(), lease.ResetAfter(), now)
}

// policyWindow is the w of a policy item: window when set, else the
// configuration's own window (a token bucket's: the time it takes to fill
// from empty); 0 (omitted) when there is none.
func policyWindow(cfg ratelimit.Config, window time.Duration) time.Duration {
	if window > 0 {
		return window
	}
	return algo.Window(cfg)
}

// appendUnit appends the qu of a policy item: ;qu="concurrent-requests"
// for a concurrency limit, nothing (requests, the default) otherwise.
func appendUnit(b []byte, cfg ratelimit.Config) []byte {
	if u := algo.Unit(cfg); u != "" {
		b = append(b, `;qu="`...)
		b = append(b, u...)
		b = append(b, '"')
	}
	return b
}

// appendParam appends ;key=n.
func appendParam(b []byte, key string, n int64) []byte {
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, n, 10)
}

// appendMembers appends a policy's RateLimit-Policy member to pol and its
// RateLimit member to lim: name (a structured-field String already) with
// q, qu and w, and with r and t, for lease, a decision of a limiter
// configured by cfg; window is w (0: omitted).
func appendMembers(pol, lim []byte, name string, cfg ratelimit.Config, window time.Duration, lease ratelimit.Lease, now time.Time) ([]byte, []byte) {
	pol = append(pol, name...)
	pol = appendParam(pol, "q", lease.Limit())
	pol = appendUnit(pol, cfg)
	if window > 0 {
		pol = appendParam(pol, "w", check.CeilSeconds(window))
	}
	lim = append(lim, name...)
	lim = appendParam(lim, "r", max(lease.Remaining(), 0))
	if t, ok := effectiveWindow(cfg, lease, now); ok {
		lim = appendParam(lim, "t", check.CeilSeconds(t))
	}
	return pol, lim
}

// AppendFields appends to pol and lim the members that Middleware writes
// in the RateLimit-Policy and RateLimit fields for one policy's decision,
// so that another transport (a gateway's rate limit service) sends the
// same fields: name (see ValidPolicyName; quoted here) with q (the lease's
// Limit), qu for a concurrency limit, and w (window, or cfg's own window
// when window is 0; omitted when neither is known); then r (the lease's
// Remaining, at least 0) and t (the time until the quota next grows, as
// Middleware computes it at now; omitted when unknown). Members already in
// pol and lim are separated from the new ones by ", ". A lease whose Limit
// is not positive (no limit) appends nothing.
func AppendFields(pol, lim []byte, name string, cfg ratelimit.Config, window time.Duration, lease ratelimit.Lease, now time.Time) ([]byte, []byte, error) {
	if err := ValidPolicyName(name); err != nil {
		return pol, lim, err
	}
	if lease.Limit() <= 0 {
		return pol, lim, nil
	}
	if cfg != nil && !check.IsNil(cfg) {
		cfg = check.Value(cfg)
	} else {
		cfg = nil
	}
	if len(pol) > 0 {
		pol = append(pol, ", "...)
	}
	if len(lim) > 0 {
		lim = append(lim, ", "...)
	}
	pol, lim = appendMembers(pol, lim, sfString(name), cfg, policyWindow(cfg, window), lease, now)
	return pol, lim, nil
}
