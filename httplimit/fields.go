package httplimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
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

// untilNext is how long from now until the next multiple of p since the
// Unix epoch (p when now is one): the end of an epoch-aligned window.
func untilNext(now time.Time, p time.Duration) time.Duration {
	n := now.UnixNano()
	return time.Duration(check.FloorStart(n, int64(p)) + int64(p) - n)
}

// effectiveWindow is the RateLimit field's t for lease, as
// draft-ietf-httpapi-ratelimit-headers-11 defines it: the time within which
// the client can use no more than the available quota, that is the time
// until the available quota next grows. ok is false when it is not known,
// and t is then omitted (the draft makes it optional).
//
// A refusal's t is its RetryAfter (the time until one permit is available),
// so Retry-After, the same figure rounded up the same way, never points
// earlier than the end of t. A grant's t comes from the lease and cfg, the
// limiter's configuration:
//
//   - token bucket, continuous: the time until the next whole token, which
//     is ResetAfter (the time until the bucket is full) modulo the time one
//     token takes; one token's time for a full bucket.
//   - token bucket, interval: the next refill, ResetAfter modulo Period, or
//     the next multiple of Period for a full bucket.
//   - fixed window: the window's end, which is ResetAfter, or the next
//     multiple of Window for an empty window.
//   - segmented sliding window: the next segment boundary, where the oldest
//     segment's grants leave the window (a lower bound when that segment
//     had none, never past the growth).
//   - sliding log: Window for an empty log (at most Limit in any Window);
//     not known otherwise: the oldest entry's age is not in the lease.
//   - weighted sliding window, concurrency, no cfg, or a cfg of another
//     kind: not known.
//
// Window alignment reads now: the limiter's clock for memory limiters,
// Redis's for redis ones; the two differ only by clock skew.
func effectiveWindow(cfg ratelimit.Config, lease ratelimit.Lease, now time.Time) (time.Duration, bool) {
	if !lease.Acquired() {
		return lease.RetryAfter()
	}
	reset := lease.ResetAfter()
	switch c := cfg.(type) {
	case tokenbucket.Config:
		if c.Period > 0 {
			if reset > 0 {
				if r := reset % c.Period; r > 0 {
					return r, true
				}
				return c.Period, true
			}
			return untilNext(now, c.Period), true
		}
		if c.Rate == rate.Inf || c.Rate <= 0 {
			return 0, false
		}
		perToken := float64(time.Second) / float64(c.Rate)
		ns := perToken
		if reset > 0 {
			if r := math.Mod(float64(reset), perToken); r > 0 {
				ns = r
			}
		}
		return time.Duration(math.Ceil(ns)), true
	case fixedwindow.Config:
		if reset > 0 {
			return reset, true
		}
		return untilNext(now, c.Window), true
	case slidingwindow.Config:
		if c.Segments > 0 {
			return untilNext(now, c.Window/time.Duration(c.Segments)), true
		}
	case slidinglog.Config:
		if reset == 0 {
			return c.Window, true
		}
	}
	return 0, false
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
