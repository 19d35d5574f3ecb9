package ratelimittest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/limitkit/ratelimit"
)

// QueueLog is a ratelimit.QueueObserver that records what it is told, for
// tests of a ratelimit.ObservableWaiter. The zero value is ready to use; it
// is safe for concurrent use.
type QueueLog struct {
	mu       sync.Mutex
	queued   []QueueEvent
	dequeued []QueueEvent
	joined   chan struct{} // closed at the first Queued
}

// QueueEvent is one call of a QueueLog's methods: its ctx and permits, and
// for Dequeued the time queued and the Wait's answer.
type QueueEvent struct {
	Ctx     context.Context
	Permits int
	Queued  time.Duration
	Lease   ratelimit.Lease
	Err     error
}

func (l *QueueLog) init() {
	if l.joined == nil {
		l.joined = make(chan struct{})
	}
}

// Queued records a Wait that joined the queue.
func (l *QueueLog) Queued(ctx context.Context, permits int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	l.queued = append(l.queued, QueueEvent{Ctx: ctx, Permits: permits})
	if len(l.queued) == 1 {
		close(l.joined)
	}
}

// Dequeued records a Wait that left the queue.
func (l *QueueLog) Dequeued(ctx context.Context, permits int, queued time.Duration, lease ratelimit.Lease, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dequeued = append(l.dequeued, QueueEvent{Ctx: ctx, Permits: permits, Queued: queued, Lease: lease, Err: err})
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

var _ ratelimit.QueueObserver = (*QueueLog)(nil)
