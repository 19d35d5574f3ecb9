package ratelimit_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/limitkit/ratelimit"
)

// A lease must stay four words (see internal/leases.Lease).
func TestLeaseIsFourWords(t *testing.T) {
	if got, want := unsafe.Sizeof(ratelimit.Lease{}), 4*unsafe.Sizeof(uintptr(0)); got != want {
		t.Errorf("Lease is %d bytes, want %d", got, want)
	}
}

func TestNewLease(t *testing.T) {
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
		{"retry now", ratelimit.Decision{RetryAfter: 0}, ratelimit.ReasonLimit, ratelimit.ReasonLimit, 0},
		{"unknown reason", ratelimit.Decision{RetryAfter: 0}, ratelimit.Reason(200), ratelimit.ReasonLimit, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := ratelimit.NewLease(c.d, 10, c.reason, nil)
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

func TestNewLeaseReleasesOnce(t *testing.T) {
	calls := 0
	g := ratelimit.NewLease(ratelimit.Decision{Granted: true, Remaining: 2}, 3, ratelimit.ReasonNone, func() { calls++ })
	c := g
	g.Release()
	c.Release()
	g.Release()
	if calls != 1 {
		t.Errorf("release called %d times, want once", calls)
	}
	r := ratelimit.NewLease(ratelimit.Decision{RetryAfter: time.Second}, 3, ratelimit.ReasonLimit, func() { calls++ })
	r.Release() // a refusal holds nothing
	if calls != 1 {
		t.Errorf("a refusal's Release called its release")
	}
}

func TestZeroLease(t *testing.T) {
	var l ratelimit.Lease
	if l.Acquired() || l.Reason() != ratelimit.ReasonNone || l.Limit() != 0 || l.Remaining() != 0 {
		t.Errorf("zero lease = %v", l)
	}
	if _, ok := l.RetryAfter(); ok {
		t.Error("the zero lease reports a RetryAfter")
	}
	if got := l.String(); got != "no decision" {
		t.Errorf("String = %q", got)
	}
	l.Release()
}
