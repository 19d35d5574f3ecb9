// Package ratelimit is the common interface of limitkit's rate limiters.
//
// A [Limiter] answers one question: may the caller take some permits now
// ([Limiter.Acquire]), or when it has waited its turn ([Limiter.Wait])? Five
// algorithms implement it, each in its own package (tokenbucket, fixedwindow,
// slidingwindow, slidinglog, concurrency), and two backends run them: memory
// (state in the process) and redis (state in Redis, shared by a fleet). The
// backends make the same decisions for the same configuration and arrival times.
//
// A refusal is a [Lease] whose Acquired reports false, never an error. An error
// means the limiter could not decide: an invalid argument, a closed limiter, a
// context that ended, or a backend failure. Errors are the sentinels declared
// here, to be tested with [errors.Is].
package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit/internal/base"
)

// Limiter hands out permits. Implementations are safe for concurrent use.
type Limiter interface {
	// Acquire takes permits now or refuses; it never waits.
	// permits == 0 is a status check that takes nothing: it is granted when at
	// least one permit is available.
	Acquire(ctx context.Context, permits int) (Lease, error)
	// Wait takes permits, waiting in line if needed, until ctx is done.
	// It refuses at once, without sleeping, when the permits cannot be had
	// before ctx's deadline, with a lease whose RetryAfter says when they could.
	Wait(ctx context.Context, permits int) (Lease, error)
}

// Idler is implemented by limiters that can tell when dropping them and
// making a new one of the same config would change no decision: IdleFor
// reports ok when the limiter is in its initial state (full bucket, empty
// window, nothing held, nobody waiting, no call in flight) and d, how long
// it has been so, as far as the limiter knows (at least how long it has
// been unused). Every limiter of this module implements it (memory, redis,
// Chain, FromRate, partitioned's For, NoLimit and Shared, shadow's);
// partitioned evicts only Idlers.
type Idler interface {
	IdleFor() (d time.Duration, ok bool)
}

// Reconfigurer is a limiter whose configuration can change while it runs
// (memory and redis limiters, their Factories, and partitioned limiters).
// Reconfigure validates cfg, which must be of the algorithm the limiter
// runs (the same Config type, value or pointer), and applies it from the
// next decision; an invalid cfg, or one of another algorithm (or one its
// backend documents it cannot apply), is an error wrapping
// ErrInvalidConfig and changes nothing. The state carries over by
// the rule each algorithm package documents (a token bucket keeps its
// tokens, clamped to the new burst; windows keep their counts, held
// against the new limit; a concurrency limit's holders keep their permits,
// and the new limit applies to new requests), so a change never admits
// more than the old or the new limit would have. Queued waiters are
// examined again under the new configuration; their queue is kept even
// when it exceeds a smaller new Queue.Limit.
type Reconfigurer interface {
	Reconfigure(cfg Config) error
}

// Resetter is a limiter that can be put back in its initial state (a full
// bucket, empty windows, nothing held: a concurrency lease held before
// gives nothing back when released): after a successful login, in tests,
// by an operator. Queued waiters are examined again. On Redis it changes
// the state every process shares.
type Resetter interface {
	Reset(ctx context.Context) error
}

// Config is satisfied by every algorithm's configuration, so a backend can be
// built from any of them: memory.New(cfg) and redis.New(client, key, cfg).
type Config interface {
	// Validate reports the first invalid field, wrapping ErrInvalidConfig.
	Validate() error
	// Capacity is the most permits one request can ever be granted; larger
	// requests fail with ErrExceedsLimit. A configuration without a limit
	// (a token bucket of rate.Inf) has math.MaxInt64: every request is
	// granted, and its leases report a Limit and Remaining of -1.
	Capacity() int64
	// QueueOptions returns the configuration's Wait queue.
	QueueOptions() Queue
}

// Errors returned by limiters. They are wrapped with details; test them
// with errors.Is.
var (
	ErrInvalidPermits = base.ErrInvalidPermits // permits is negative
	ErrExceedsLimit   = base.ErrExceedsLimit   // permits is over the capacity: never granted
	ErrInvalidConfig  = base.ErrInvalidConfig  // a configuration field is out of range
	ErrClosed         = base.ErrClosed         // the limiter was closed
	ErrNilContext     = base.ErrNilContext     // Acquire or Wait was called with a nil context
)

// Refunder is a limiter that can take back a grant it has just made, as if
// the request had not been made: its permits, and its count in the
// limiter's Stats (Granted). Chain uses it to make an attempt that a
// later limiter refuses spend nothing of the earlier ones; a limiter
// without it keeps what it granted (its permits come back with time).
type Refunder interface {
	// Refund gives back the permits of lease, a grant of permits that this
	// limiter returned. What has come back with time since the grant (a
	// window that ended, tokens that refilled past the burst) is not given
	// twice. A refund is trusted: the caller passes a grant of this
	// limiter, once, with the permits it asked for (Chain does); then the
	// limiter never lets more through than its limit. A refusal, or a lease
	// of a limiter of another configuration, gives nothing back; but
	// limiters made by one memory.Factory (or on one Redis key) share their
	// leases' outcome and cannot tell each other's grants apart, and a
	// second refund of a grant gives its permits again.
	Refund(ctx context.Context, lease Lease, permits int) error
}

// PermitChecker is a limiter that can tell, without deciding, the error
// its Acquire and Wait return for permits whatever its state: a negative
// permits wraps ErrInvalidPermits, more than its capacity now wraps
// ErrExceedsLimit; nil when permits can be granted some time. Chain asks
// each member before asking any to decide, so that a request that one of
// them can never grant changes no member's state. Memory and redis
// limiters and chains are PermitCheckers.
type PermitChecker interface {
	CheckPermits(permits int) error
}

// ObservableWaiter is a limiter whose Wait can tell a QueueObserver of the
// calls that queue: what metrics of the time spent queued need (the otel
// module's wrapper uses it), since a Wait answered at once cannot be told
// apart from outside without reading the clock twice. The limiters of this
// module that can make a Wait wait implement it: memory, redis, FromRate,
// Chain, partitioned's (For, Shared, NoLimit) and shadow's wrappers, and
// the otel module's. A
// wrapper (partitioned's, Chain) passes it on to the limiter it waits on;
// when that one is not an ObservableWaiter, it cannot tell, and each of its
// Waits is told as queued for its whole duration. A type that embeds one of
// them and changes its Wait must change (or hide) WaitObserved too, or its
// callers' observers bypass that Wait.
type ObservableWaiter interface {
	// WaitObserved is Wait. When the call joins the queue (it cannot be
	// answered at once: memory queues it, Redis and FromRate sleep), it
	// calls o.Queued; when it leaves it, o.Dequeued with what it is about
	// to return. Both are called in the calling goroutine, with its ctx,
	// before WaitObserved returns; neither is called when the call is
	// answered without queueing (a grant at once, a refusal at once such
	// as ReasonQueueFull or ReasonDeadline, an error).
	WaitObserved(ctx context.Context, permits int, o QueueObserver) (Lease, error)
}

// QueueObserver is told of the Waits that queue (see ObservableWaiter).
// Its methods must be quick and must not call the limiter.
type QueueObserver interface {
	// Queued is called when a Wait for permits joins the queue.
	Queued(ctx context.Context, permits int)
	// Dequeued is called when that Wait leaves the queue, after spending
	// queued there (on the limiter's clock), with what the Wait returns: a
	// grant, a refusal (evicted, closed, a new configuration's), or an
	// error (ctx's, or a backend failure).
	Dequeued(ctx context.Context, permits int, queued time.Duration, lease Lease, err error)
}

// QueueOrder says which waiter is served first when permits come back.
type QueueOrder uint8

const (
	// OldestFirst serves waiters in arrival order (FIFO). A new request never
	// overtakes a non-empty queue, and is refused at once when the queue is full.
	OldestFirst QueueOrder = iota
	// NewestFirst serves the newest waiter first (LIFO). A new request may take
	// free permits even while others wait, and when the queue is full the oldest
	// waiters are refused (ReasonEvicted) to make room.
	NewestFirst
)

func (o QueueOrder) String() string {
	switch o {
	case OldestFirst:
		return "OldestFirst"
	case NewestFirst:
		return "NewestFirst"
	}
	return fmt.Sprintf("QueueOrder(%d)", uint8(o))
}

// Queue configures how Wait waits for permits that are not available at
// once. The zero value queues waiters in arrival order with no bound but
// their contexts: Wait waits its turn until ctx is done, as x/time/rate's
// WaitN does. (A caller that must not wait calls Acquire.)
type Queue struct {
	// Limit is the most permits (not requests) that may wait at once: a
	// Wait that would queue more is refused at once (ReasonQueueFull).
	// Zero means no limit.
	Limit int
	// Order is the serving order; the zero value is OldestFirst.
	Order QueueOrder
}

// Stats is a snapshot of a limiter, from the optional method Stats() Stats.
// Status checks (permits == 0) and calls that return an error are counted
// in neither Granted nor Refused.
type Stats struct {
	Available int64  // permits that could be granted now; math.MaxInt64 without a limit
	Queued    int64  // permits waiting in the queue
	Granted   uint64 // requests for permits granted since creation
	Refused   uint64 // requests for permits refused since creation
}

// Clock is a limiter's source of time. Production code uses the system's
// monotonic clock; tests inject a fake one (see ratelimittest.Clock).
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is what Clock.AfterFunc returns; *time.Timer satisfies it.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}
