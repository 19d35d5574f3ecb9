package ratelimittest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/limitkit/ratelimit/waittrace"
)

// QueueLog records what a limiter's Wait tells the waittrace hooks of the
// calls that queue: put Hooks on a Wait's ctx with waittrace.WithHooks. The
// zero value is ready to use; it is safe for concurrent use.
type QueueLog struct {
	mu       sync.Mutex
	queued   []QueueEvent
	dequeued []QueueEvent
	joined   chan struct{} // closed at the first Queued
}

// QueueEvent is one call of a QueueLog's hooks: its ctx and permits, and
// for Dequeued the time queued and what the Wait told (Granted, Err).
type QueueEvent struct {
	Ctx     context.Context
	Permits int
	Queued  time.Duration
	Granted bool
	Err     error
}

func (l *QueueLog) init() {
	if l.joined == nil {
		l.joined = make(chan struct{})
	}
}

// Hooks returns the hooks that record into l.
func (l *QueueLog) Hooks() *waittrace.Hooks {
	return &waittrace.Hooks{Queued: l.queue, Dequeued: l.dequeue}
}

func (l *QueueLog) queue(ctx context.Context, permits int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	l.queued = append(l.queued, QueueEvent{Ctx: ctx, Permits: permits})
	if len(l.queued) == 1 {
		close(l.joined)
	}
}

func (l *QueueLog) dequeue(ctx context.Context, permits int, queued time.Duration, granted bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dequeued = append(l.dequeued, QueueEvent{Ctx: ctx, Permits: permits, Queued: queued, Granted: granted, Err: err})
}

// Told returns the calls of Queued and of Dequeued so far, in order.
func (l *QueueLog) Told() (queued, dequeued []QueueEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.queued), slices.Clone(l.dequeued)
}

// Joined returns a channel closed once Queued has been called.
func (l *QueueLog) Joined() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	return l.joined
}
