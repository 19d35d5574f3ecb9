package ratelimit_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/limitkit/ratelimit"
)

// A lease must stay four words: larger, the compiler builds it in memory and
// copies it out, and every decision pays for the copy (see Lease).
func TestLeaseIsFourWords(t *testing.T) {
	if got, want := unsafe.Sizeof(ratelimit.Lease{}), 4*unsafe.Sizeof(uintptr(0)); got != want {
		t.Errorf("Lease is %d bytes, want %d", got, want)
	}
}

func TestLeases(t *testing.T) {
	ls := ratelimit.MakeLeases(10)
	for _, c := range []struct {
		name       string
		d          ratelimit.Decision
		reason     ratelimit.Reason
		wantReason ratelimit.Reason
		wantRetry  time.Duration // -1: not known
	}{
		{"grant ignores the reason", ratelimit.Decision{Granted: true, Remaining: 7, RetryAfter: 5, ResetAfter: 3 * time.Second}, ratelimit.ReasonQueueFull, ratelimit.ReasonNone, -1},
		{"refusal defaults to limit", ratelimit.Decision{Remaining: 0, RetryAfter: 2 * time.Second, ResetAfter: 3 * time.Second}, ratelimit.ReasonNone, ratelimit.ReasonLimit, 2 * time.Second},
		{"refusal keeps its reason", ratelimit.Decision{Remaining: 1, RetryAfter: time.Second}, ratelimit.ReasonDeadline, ratelimit.ReasonDeadline, time.Second},
		{"unknown wait", ratelimit.Decision{RetryAfter: -1}, ratelimit.ReasonClosed, ratelimit.ReasonClosed, -1},
		{"unknown reason", ratelimit.Decision{RetryAfter: 0}, ratelimit.Reason(200), ratelimit.ReasonLimit, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := ls.Lease(c.d, c.reason)
			if l.Acquired() != c.d.Granted || l.Reason() != c.wantReason {
				t.Errorf("Acquired, Reason = %v, %v; want %v, %v", l.Acquired(), l.Reason(), c.d.Granted, c.wantReason)
			}
			if l.Remaining() != c.d.Remaining || l.Limit() != 10 || l.ResetAfter() != c.d.ResetAfter {
				t.Errorf("Remaining, Limit, ResetAfter = %d, %d, %v; want %d, 10, %v", l.Remaining(), l.Limit(), l.ResetAfter(), c.d.Remaining, c.d.ResetAfter)
			}
			retry, ok := l.RetryAfter()
			if want := c.wantRetry; ok != (want >= 0) || (ok && retry != want) {
				t.Errorf("RetryAfter = %v, %v; want %v", retry, ok, want)
			}
			l.Release() // releases nothing, and must not panic
		})
	}
}

// tokens records the tokens it is released with.
type tokens []uint64

func (r *tokens) Release(token uint64) { *r = append(*r, token) }

func TestGrantInfoPassesTheToken(t *testing.T) {
	var got tokens
	info := ratelimit.GrantInfo(5, &got)
	const token = 1<<63 | 42 // every bit survives
	l := info.Lease(ratelimit.Decision{Granted: true, Remaining: 4, RetryAfter: -1}, token)
	if !l.Acquired() || l.Limit() != 5 || l.Remaining() != 4 {
		t.Fatalf("lease = %v", l)
	}
	if d, ok := l.RetryAfter(); ok {
		t.Errorf("a grant reports RetryAfter %v", d)
	}
	c := l
	l.Release()
	c.Release()
	if len(got) != 2 || got[0] != token || got[1] != token {
		t.Errorf("released with %v, want the token twice (the Releaser makes it idempotent)", got)
	}
}

func TestNewLease(t *testing.T) {
	var got tokens
	g := ratelimit.NewLease(ratelimit.Decision{Granted: true, Remaining: 2}, 3, ratelimit.ReasonQueueFull, &got, 9)
	r := ratelimit.NewLease(ratelimit.Decision{RetryAfter: time.Second}, 3, ratelimit.ReasonNone, &got, 8)
	if !g.Acquired() || g.Reason() != ratelimit.ReasonNone || g.Limit() != 3 || g.Remaining() != 2 {
		t.Errorf("grant = %v", g)
	}
	if r.Acquired() || r.Reason() != ratelimit.ReasonLimit || r.Limit() != 3 {
		t.Errorf("refusal = %v", r)
	}
	g.Release()
	r.Release() // a refusal holds nothing
	if len(got) != 1 || got[0] != 9 {
		t.Errorf("released with %v, want [9]", got)
	}
}

func TestZeroLease(t *testing.T) {
	var l ratelimit.Lease
	if l.Acquired() || l.Reason() != ratelimit.ReasonNone || l.Limit() != 0 || l.Remaining() != 0 {
		t.Errorf("zero lease = %v", l)
	}
	l.Release()
}
