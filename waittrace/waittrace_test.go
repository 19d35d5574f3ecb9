package waittrace_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/waittrace"
)

type log struct {
	queued, dequeued int
	d                time.Duration
	granted          bool
	err              error
}

func (l *log) hooks() *waittrace.Hooks {
	return &waittrace.Hooks{
		Queued: func(context.Context, int) { l.queued++ },
		Dequeued: func(_ context.Context, _ int, d time.Duration, granted bool, err error) {
			l.dequeued++
			l.d, l.granted, l.err = d, granted, err
		},
	}
}

func TestNoHooks(t *testing.T) {
	ctx := context.Background()
	got, span := waittrace.Begin(ctx, 1)
	if span != nil || got != ctx {
		t.Fatalf("Begin without hooks: %v, %v; want ctx itself and a nil Span", got, span)
	}
	span.Join(time.Now()) // a nil Span does nothing
	span.Done(time.Now(), true, nil)
}

func TestOnceEach(t *testing.T) {
	var l log
	_, span := waittrace.Begin(waittrace.WithHooks(context.Background(), l.hooks()), 2)
	t0 := time.Unix(100, 0)
	span.Join(t0)
	span.Join(t0.Add(time.Second)) // the first Join counts
	span.Done(t0.Add(3*time.Second), false, errors.ErrUnsupported)
	span.Done(t0.Add(4*time.Second), true, nil)
	if l.queued != 1 || l.dequeued != 1 || l.d != 3*time.Second || l.granted || !errors.Is(l.err, errors.ErrUnsupported) {
		t.Fatalf("told %+v; want Queued once, Dequeued once after 3s, refused with the error", l)
	}
}

func TestNotJoinedTellsNothing(t *testing.T) {
	var l log
	_, span := waittrace.Begin(waittrace.WithHooks(context.Background(), l.hooks()), 1)
	span.Done(time.Now(), true, nil)
	if l.queued+l.dequeued != 0 {
		t.Fatalf("a Wait answered at once told %+v", l)
	}
}

// A Wait made inside another (a Chain's on its member) is told as the
// outer one: one Queued, one Dequeued when the outer one is done, with the
// time queued in each, each measured on its own limiter's clock (an inner
// one on a fake clock far from the outer's).
func TestNested(t *testing.T) {
	var l log
	ctx, outer := waittrace.Begin(waittrace.WithHooks(context.Background(), l.hooks()), 1)
	_, inner := waittrace.Begin(ctx, 1)
	fake := time.Unix(2_000_000_000, 0)
	inner.Join(fake)
	inner.Done(fake.Add(time.Second), true, nil)
	if l.queued != 1 || l.dequeued != 0 {
		t.Fatalf("after the inner Wait: %+v; want Queued once, no Dequeued yet", l)
	}
	_, again := waittrace.Begin(ctx, 1) // queued in a member a second time
	again.Join(fake.Add(2 * time.Second))
	again.Done(fake.Add(4*time.Second), true, nil)
	t0 := time.Unix(100, 0)
	outer.Join(t0) // and asleep itself, on the system clock
	outer.Done(t0.Add(3*time.Second), true, nil)
	if l.queued != 1 || l.dequeued != 1 || l.d != 6*time.Second {
		t.Fatalf("after the outer Wait: %+v; want once each, 1s + 2s + 3s queued", l)
	}
}

// A Wait that slept (Join, Leave) and then waited in an inner Wait is told
// the sum, each interval once: the sleep's, then the inner one's.
func TestLeaveThenNested(t *testing.T) {
	var l log
	ctx, outer := waittrace.Begin(waittrace.WithHooks(context.Background(), l.hooks()), 1)
	t0 := time.Unix(100, 0)
	outer.Join(t0)
	outer.Leave(t0.Add(50 * time.Millisecond))
	outer.Leave(t0.Add(time.Hour)) // left already: nothing more
	_, inner := waittrace.Begin(ctx, 1)
	inner.Join(t0.Add(50 * time.Millisecond))
	inner.Done(t0.Add(100*time.Millisecond), true, nil)
	outer.Done(t0.Add(100*time.Millisecond), true, nil)
	if l.queued != 1 || l.dequeued != 1 || l.d != 100*time.Millisecond {
		t.Fatalf("told %+v; want once each, 50ms asleep + 50ms queued", l)
	}
}

// An outer Wait that never joined, but whose inner one did, is told.
func TestNestedOnlyInner(t *testing.T) {
	var l log
	ctx, outer := waittrace.Begin(waittrace.WithHooks(context.Background(), l.hooks()), 1)
	_, inner := waittrace.Begin(ctx, 1)
	t0 := time.Unix(100, 0)
	inner.Join(t0)
	inner.Done(t0.Add(time.Second), true, nil)
	outer.Done(time.Unix(0, 0), false, nil)
	if l.queued != 1 || l.dequeued != 1 || l.d != time.Second || l.granted {
		t.Fatalf("told %+v; want once each, 1s queued, refused", l)
	}
}

// Hooks put on a ctx that carries some are told after the new ones.
func TestWithHooksComposes(t *testing.T) {
	var order []string
	first := &waittrace.Hooks{Queued: func(context.Context, int) { order = append(order, "first") }}
	second := &waittrace.Hooks{Queued: func(context.Context, int) { order = append(order, "second") }}
	ctx := waittrace.WithHooks(waittrace.WithHooks(context.Background(), first), second)
	_, span := waittrace.Begin(ctx, 1)
	span.Join(time.Now())
	span.Done(time.Now(), true, nil) // a nil Dequeued is not called
	if len(order) != 2 || order[0] != "second" || order[1] != "first" {
		t.Fatalf("told in order %v, want second then first", order)
	}
}

// Nil hooks change nothing: the hooks already there are told.
func TestWithNilHooks(t *testing.T) {
	var l log
	ctx := waittrace.WithHooks(waittrace.WithHooks(context.Background(), l.hooks()), nil)
	_, span := waittrace.Begin(ctx, 1)
	span.Join(time.Now())
	span.Done(time.Now(), true, nil)
	if l.queued != 1 || l.dequeued != 1 {
		t.Fatalf("told %+v; want once each", l)
	}
}
