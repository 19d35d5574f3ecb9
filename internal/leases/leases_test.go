package leases

import (
	"testing"
	"time"
)

// tokens records the tokens it is released with.
type tokens []uint64

func (r *tokens) Release(token uint64) { *r = append(*r, token) }

func TestInfosMake(t *testing.T) {
	is := MakeInfos(10)
	g := is.Make(true, 3, 7, 5, time.Second, 42)
	if !g.Acquired() || g.Reason() != 0 || g.Limit() != 10 || g.Remaining() != 7 || g.ResetAfter() != time.Second {
		t.Errorf("grant = %+v", g)
	}
	if _, ok := g.RetryAfter(); ok {
		t.Error("a grant reports a RetryAfter")
	}
	if tok, ok := g.Token(&is[0]); !ok || tok != 42 {
		t.Errorf("Token = %d, %v; want 42", tok, ok)
	}
	for _, c := range []struct {
		reason, want uint8
		retry        time.Duration
		known        bool
	}{{0, Limit, 2 * time.Second, true}, {4, 4, 0, true}, {5, 5, -1, false}, {200, Limit, time.Second, true}} {
		r := is.Make(false, c.reason, 1, c.retry, 0, 9)
		if r.Acquired() || r.Reason() != c.want {
			t.Errorf("reason %d: Acquired, Reason = %v, %d; want false, %d", c.reason, r.Acquired(), r.Reason(), c.want)
		}
		if d, ok := r.RetryAfter(); ok != c.known || (ok && d != c.retry) {
			t.Errorf("reason %d: RetryAfter = %v, %v; want %v", c.reason, d, ok, c.retry)
		}
		if _, ok := r.Token(&is[0]); ok {
			t.Errorf("reason %d: a refusal has a token", c.reason)
		}
	}
}

func TestGrantInfoPassesTheToken(t *testing.T) {
	var got tokens
	info := GrantInfo(5, &got)
	const token = 1<<63 | 42 // every bit survives
	l := info.Grant(4, 0, token)
	if !l.Acquired() || l.Limit() != 5 || l.Remaining() != 4 {
		t.Fatalf("lease = %+v", l)
	}
	other := MakeInfos(5)
	if _, ok := l.Token(&other[0]); ok {
		t.Error("Token recognises a lease of another Info")
	}
	c := l
	l.Release()
	c.Release()
	if len(got) != 2 || got[0] != token || got[1] != token {
		t.Errorf("released with %v, want the token twice (the Releaser makes it idempotent)", got)
	}
}
