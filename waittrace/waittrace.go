// Package waittrace carries on a context the hooks that a limiter's Wait
// calls when it queues, as net/http/httptrace carries a ClientTrace: what a
// metric of the time spent queued needs, since a Wait answered at once
// cannot be told apart from outside without reading the clock twice.
//
// The caller puts Hooks on the Wait's ctx with WithHooks. A limiter that
// can make a Wait wait (the memory and redis backends, Chain, FromRate,
// partitioned's) tells them with a Span: Begin when the Wait starts, Join
// when it joins a queue or starts to sleep, Done when it is answered. A
// limiter that knows nothing of this package tells nothing: its Waits look
// answered at once.
package waittrace

import (
	"context"
	"sync"
	"time"
)

// Hooks are told of a Wait that queues, each at most once per Wait call,
// in the calling goroutine, with the Wait's ctx, before Wait returns;
// neither is called when the call is answered without queueing (a grant
// at once, a refusal at once, an error). A nil field is not called. They
// must be quick and must not call the limiter.
type Hooks struct {
	// Queued is called when a Wait for permits joins a queue (or starts
	// to sleep until its permits may be had).
	Queued func(ctx context.Context, permits int)
	// Dequeued is called when that Wait leaves the queue, after spending
	// queued there (on the limiter's clock), just before it returns what
	// it tells: granted (it got its permits) and err (its error, nil for
	// a grant or a refusal).
	Dequeued func(ctx context.Context, permits int, queued time.Duration, granted bool, err error)
}

type hooksKey struct{}
type spanKey struct{}

// WithHooks returns a copy of ctx whose Waits call h, and then the hooks
// ctx already carried, if any. A nil h returns ctx.
func WithHooks(ctx context.Context, h *Hooks) context.Context {
	if h == nil {
		return ctx
	}
	if old, _ := ctx.Value(hooksKey{}).(*Hooks); old != nil {
		h = compose(h, old)
	}
	return context.WithValue(ctx, hooksKey{}, h)
}

func compose(h, old *Hooks) *Hooks {
	return &Hooks{
		Queued: func(ctx context.Context, permits int) {
			if h.Queued != nil {
				h.Queued(ctx, permits)
			}
			if old.Queued != nil {
				old.Queued(ctx, permits)
			}
		},
		Dequeued: func(ctx context.Context, permits int, queued time.Duration, granted bool, err error) {
			if h.Dequeued != nil {
				h.Dequeued(ctx, permits, queued, granted, err)
			}
			if old.Dequeued != nil {
				old.Dequeued(ctx, permits, queued, granted, err)
			}
		},
	}
}

// Span is one Wait call as its hooks see it. The methods of a nil *Span
// do nothing.
type Span struct {
	h       *Hooks
	ctx     context.Context
	permits int
	outer   *Span         // a Span begun on ctx before this one: it tells
	told    bool          // Queued was told (an outer Span's)
	queued  bool          // this Span joined, at since, and is not done
	since   time.Time     // on the clock of the limiter that joined
	spent   time.Duration // queued in the inner Spans done (each on its own clock)
	mu      sync.Mutex    // guards told and spent, which inner Spans write
}

// Begin starts the Span of a Wait for permits on ctx, and returns the ctx
// to pass to the limiters that this Wait waits on in turn (a Chain's
// members), whose queueing is then told as this Wait's. It returns a nil
// Span, and ctx itself, when ctx carries no hooks.
func Begin(ctx context.Context, permits int) (context.Context, *Span) {
	if ctx == nil {
		return ctx, nil
	}
	if outer, _ := ctx.Value(spanKey{}).(*Span); outer != nil {
		return ctx, &Span{outer: outer}
	}
	h, _ := ctx.Value(hooksKey{}).(*Hooks)
	if h == nil {
		return ctx, nil
	}
	s := &Span{h: h, ctx: ctx, permits: permits}
	return context.WithValue(ctx, spanKey{}, s), s
}

// Join marks that the Wait joins a queue, or starts a sleep, at now (the
// limiter's clock): the first Join of a Wait, or of any Wait begun inside
// it, tells Queued.
func (s *Span) Join(now time.Time) {
	if s == nil || s.queued {
		return
	}
	s.queued, s.since = true, now
	top := s
	for top.outer != nil {
		top = top.outer
	}
	top.mu.Lock()
	tell := !top.told
	top.told = true
	top.mu.Unlock()
	if tell && top.h.Queued != nil {
		top.h.Queued(top.ctx, top.permits)
	}
}

// Leave marks that the Wait stops queueing, or sleeping, at now, without
// an answer: it asks again, and may Join again. The time since its Join
// counts as queued, once; a Wait begun inside it afterwards adds its own
// time, not counted twice.
func (s *Span) Leave(now time.Time) {
	if s == nil || !s.queued {
		return
	}
	s.queued = false
	top := s
	for top.outer != nil {
		top = top.outer
	}
	top.mu.Lock()
	top.spent += max(now.Sub(s.since), 0)
	top.mu.Unlock()
}

// Done marks that the Wait is answered at now, granted or not, with err.
// A Span begun inside another Wait's adds the time it spent queued (from
// its Join, on its own limiter's clock) to the outer one's; the outer one,
// when it or an inner one joined, tells Dequeued the time spent queued in
// all.
func (s *Span) Done(now time.Time, granted bool, err error) {
	if s == nil {
		return
	}
	var d time.Duration
	if s.queued {
		s.queued = false
		d = max(now.Sub(s.since), 0)
	}
	if s.outer != nil {
		top := s.outer
		for top.outer != nil {
			top = top.outer
		}
		top.mu.Lock()
		top.spent += d
		top.mu.Unlock()
		return
	}
	s.mu.Lock()
	told := s.told
	d += s.spent
	s.told, s.spent = false, 0
	s.mu.Unlock()
	if told && s.h.Dequeued != nil {
		s.h.Dequeued(s.ctx, s.permits, d, granted, err)
	}
}
