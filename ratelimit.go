// Package ratelimit is the common interface of limitkit's rate limiters.
//
// A [Limiter] answers one question: may the caller take some permits now
// ([Limiter.Acquire]), or when it has waited its turn ([Limiter.Wait])? Six
// algorithms implement it, each in its own package (tokenbucket, fixedwindow,
// slidingwindow, slidinglog, concurrency, and quota for calendar periods),
// and two backends run them: memory (state in the process) and redis (state
// in Redis, shared by a fleet). The backends make the same decisions for the
// same configuration and arrival times.
//
// A refusal is a [Lease] whose Acquired reports false, never an error. An error
// means the limiter could not decide: an invalid argument, a closed limiter, a
// context that ended, or a backend failure. Errors are the sentinels declared
// here, to be tested with [errors.Is].
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter hands out permits. Implementations are safe for concurrent use.
type Limiter interface {
	// Acquire takes permits now or refuses; it never waits.
	// permits == 0 is a status check that takes nothing: it is granted when at
	// least one permit is available. It reads the limit, not the queue: while
	// waiters queue OldestFirst, a request of one permit may be refused behind
	// them when the status check is granted.
	Acquire(ctx context.Context, permits int) (Lease, error)
	// Wait takes permits, waiting in line if needed, until ctx is done.
	// It refuses at once, without sleeping, when the permits cannot be had
	// before ctx's deadline, with a lease whose RetryAfter says when they could.
	Wait(ctx context.Context, permits int) (Lease, error)
}

// Keyed hands out permits for keys: a limit per user, IP or host, each key
// with a limiter of its own, or one limiter for every key (package
// partitioned makes both). It is what the middlewares (httplimit,
// grpclimit), the policy registry and the otel recorder take. Acquire and
// Wait are Limiter's, for key; implementations are safe for concurrent
// use. A Keyed may also have a method For(key string) Limiter, the limiter
// of one key, through which package control reaches that key's
// capabilities (a Refund, a Reset): partitioned's do.
type Keyed interface {
	Acquire(ctx context.Context, key string, permits int) (Lease, error)
	Wait(ctx context.Context, key string, permits int) (Lease, error)
}

// Config is satisfied by every algorithm's configuration, so a backend can be
// built from any of them: memory.New(cfg) and redis.New(client, key, cfg).
// Only the configurations of this module's algorithm packages are: a
// backend refuses another type with ErrInvalidConfig, naming it.
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
	ErrInvalidPermits = errors.New("ratelimit: invalid permits")          // permits is negative
	ErrExceedsLimit   = errors.New("ratelimit: permits exceed the limit") // permits is over the capacity: never granted
	ErrInvalidConfig  = errors.New("ratelimit: invalid config")           // a configuration field is out of range
	ErrClosed         = errors.New("ratelimit: limiter closed")           // the limiter was closed
	ErrNilContext     = errors.New("ratelimit: nil context")              // Acquire or Wait was called with a nil context
)

// QueueOrder says which waiter is served first when permits come back.
type QueueOrder uint8

const (
	// OldestFirst serves waiters in arrival order (FIFO). A new request never
	// overtakes a non-empty queue, and is refused at once when the queue is full.
	OldestFirst QueueOrder = iota
	// NewestFirst serves the newest waiter first (LIFO). A new request may take
	// free permits even while others wait, and when the queue is full the oldest
	// waiters are refused (ReasonEvicted) to make room. A token bucket, whose
	// waiters reserve their tokens as they come, serves them in arrival order
	// in either order; with NewestFirst a full queue still makes room by
	// refusing its oldest waiters in memory (on Redis it refuses the new
	// request).
	NewestFirst
)

// String is the order's name: "OldestFirst" or "NewestFirst".
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

// Stats is a snapshot of a limiter: what control.Stats returns.
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
	// AfterFunc calls f in its own goroutine once d has passed, unless
	// stop is called first: stop reports whether it stopped the call (as
	// time.Timer's Stop does).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}
