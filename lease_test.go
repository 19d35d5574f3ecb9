package ratelimit_test

import (
	"testing"
	"time"
	"unsafe"

	"github.com/limitkit/ratelimit"
)

// A lease must stay four words (see Lease and BenchmarkLeaseWords).
func TestLeaseIsFourWords(t *testing.T) {
	if got, want := unsafe.Sizeof(ratelimit.Lease{}), 4*unsafe.Sizeof(uintptr(0)); got != want {
		t.Errorf("Lease is %d bytes, want %d", got, want)
	}
}

func TestOutcomeLease(t *testing.T) {
	for _, c := range []struct {
		name       string
		reason     ratelimit.Reason
		remaining  int64
		retry      time.Duration
		wantReason ratelimit.Reason
		wantRetry  time.Duration // -1: not known
	}{
		{"grant", ratelimit.ReasonNone, 7, 5, ratelimit.ReasonNone, -1},
		{"refusal keeps its reason", ratelimit.ReasonDeadline, 1, time.Second, ratelimit.ReasonDeadline, time.Second},
		{"unknown wait", ratelimit.ReasonClosed, 0, -1, ratelimit.ReasonClosed, -1},
		{"retry now", ratelimit.ReasonLimit, 0, 0, ratelimit.ReasonLimit, 0},
		{"unknown reason", ratelimit.Reason(200), 0, 0, ratelimit.ReasonLimit, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &ratelimit.Outcome{Limit: 10, Reason: c.reason}
			l := o.Lease(c.remaining, c.retry, 3*time.Second, 9)
			granted := c.reason == ratelimit.ReasonNone
			if l.Acquired() != granted || l.Reason() != c.wantReason {
				t.Errorf("Acquired, Reason = %v, %v; want %v, %v", l.Acquired(), l.Reason(), granted, c.wantReason)
			}
			if l.Remaining() != c.remaining || l.Limit() != 10 || l.ResetAfter() != 3*time.Second {
				t.Errorf("Remaining, Limit, ResetAfter = %d, %d, %v; want %d, 10, 3s", l.Remaining(), l.Limit(), l.ResetAfter(), c.remaining)
			}
			retry, ok := l.RetryAfter()
			if want := c.wantRetry; ok != (want >= 0) || (ok && retry != want) {
				t.Errorf("RetryAfter = %v, %v; want %v", retry, ok, want)
			}
			if tok, ok := o.Token(l); ok != granted || (ok && tok != 9) {
				t.Errorf("Token = %d, %v; want 9 for a grant, none for a refusal", tok, ok)
			}
			if l.Outcome() != o {
				t.Error("Outcome is not the lease's")
			}
			l.Release() // releases nothing, and must not panic
		})
	}
}

// tokens records the tokens it is released with.
type tokens []uint64

func (r *tokens) Release(token uint64) { *r = append(*r, token) }

func TestOutcomePassesTheToken(t *testing.T) {
	var got tokens
	o := &ratelimit.Outcome{Limit: 5, Releaser: &got}
	const token = 1<<63 | 42 // every bit survives
	l := o.Lease(4, 0, 0, token)
	if !l.Acquired() || l.Limit() != 5 || l.Remaining() != 4 {
		t.Fatalf("lease = %v", l)
	}
	if _, ok := (&ratelimit.Outcome{Limit: 5}).Token(l); ok {
		t.Error("Token recognises a lease of another Outcome")
	}
	c := l
	l.Release()
	c.Release()
	if len(got) != 2 || got[0] != token || got[1] != token {
		t.Errorf("released with %v, want the token twice (the Releaser makes it idempotent)", got)
	}
	refused := (&ratelimit.Outcome{Limit: 5, Reason: ratelimit.ReasonLimit, Releaser: &got}).Lease(0, time.Second, 0, 0)
	refused.Release() // a refusal holds nothing
	if len(got) != 2 {
		t.Errorf("a refusal's Release called its Releaser")
	}
}

// grows says a GrowsAfter of remaining seconds.
type grows struct{}

func (grows) GrowsAfter(remaining int64, _ time.Duration, _ time.Time) (time.Duration, bool) {
	return time.Duration(remaining) * time.Second, true
}

func TestOutcomeGrows(t *testing.T) {
	now := time.Unix(1, 0)
	g := (&ratelimit.Outcome{Limit: 5, Grows: grows{}}).Lease(3, 0, 0, 0)
	if d, ok := g.GrowsAfter(now); !ok || d != 3*time.Second {
		t.Errorf("GrowsAfter = %v, %v; want 3s", d, ok)
	}
	if _, ok := (&ratelimit.Outcome{Limit: 5}).Lease(3, 0, 0, 0).GrowsAfter(now); ok {
		t.Error("a grant of an Outcome without Grows reports a GrowsAfter")
	}
	r := (&ratelimit.Outcome{Limit: 5, Reason: ratelimit.ReasonLimit, Grows: grows{}}).Lease(3, 0, 0, 0)
	if _, ok := r.GrowsAfter(now); ok {
		t.Error("a refusal reports a GrowsAfter")
	}
}

func TestZeroLease(t *testing.T) {
	var l ratelimit.Lease
	if l.Acquired() || l.Reason() != ratelimit.ReasonNone || l.Limit() != 0 || l.Remaining() != 0 || l.Outcome() != nil {
		t.Errorf("zero lease = %v", l)
	}
	if _, ok := l.RetryAfter(); ok {
		t.Error("the zero lease reports a RetryAfter")
	}
	if _, ok := l.GrowsAfter(time.Now()); ok {
		t.Error("the zero lease reports a GrowsAfter")
	}
	if got := l.String(); got != "no decision" {
		t.Errorf("String = %q", got)
	}
	l.Release()
}
