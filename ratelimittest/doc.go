// Package ratelimittest is the kit for testing a rate limiter: one's own
// ratelimit.Limiter, or code that uses one.
//
// TestLimiter checks the contract of ratelimit.Limiter on any limiter, on
// the real clock, and reports every violation by name, as
// testing/fstest.TestFS does for a file system: a refusal changes nothing,
// waiting RetryAfter suffices, Release is idempotent, held permits never
// exceed the capacity, argument errors are the module's sentinels.
//
// Clock is a fake ratelimit.Clock for exact tests: pass it to a limiter
// (memory.WithClock, redis.WithClock) and move time with Advance. QueueLog
// records what a limiter tells the waittrace hooks of the Waits that queue.
//
// The scenarios that hold limitkit's own backends to the same decisions
// (exact sequences per algorithm, queues, extreme configurations, bounds
// on the real clock) are the module's internal conformance suite.
package ratelimittest
