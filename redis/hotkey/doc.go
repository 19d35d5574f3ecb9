// Package hotkey serves one limit on a hot key from local leases of
// pre-paid permits, for a fleet that asks more of one key than one Redis
// shard can decide (about 100,000 decisions a second for the exact limiter
// of package redis): a global limit for a whole API, or for every call to
// an upstream. It never admits more than the exact limiter would, by
// construction; what it gives up is some admissions (see Cost).
//
//	l, err := hotkey.New(client, "api", fixedwindow.Config{Limit: 500_000, Window: time.Second})
//	defer l.Close() // gives the unspent permits back
//
// # Leases
//
// A request that its process's lease cannot serve makes one script call,
// which decides the request's p permits now, exactly as the exact limiter
// decides them, and debits h more into a new lease of the process (giving
// back, in the same call, the unspent permits of the one it replaces). The
// process then spends the lease's permits locally, at memory speed, until
// the lease's deadline. A lease holds what the process's recent demand
// spends in half an expiry (WithExpiry, 100ms by default; an eighth for a
// sliding log, see Cost), so a quiet process holds little; all live leases together hold at most a fraction
// of the limit (WithShare, a quarter by default); and a lease is given back
// when its process is idle (nothing spent from it over a quarter of its
// expiry), at three quarters of its expiry, and on Close. A lease lives
// until its expiry E on Redis's clock: E = now + expiry, the script's now.
// Its process's deadline is the instant it sent the call plus the same
// expiry (less a margin of a thousandth for the rates of two clocks), so it
// falls before E whatever the round trip; a permit is spent only once its
// process has read its clock and found it before the deadline. So every
// permit of a lease is spent after its debit and before E, and before its
// lease is given back (a process stops spending a lease before it sends it
// back). Redis keeps the live leases (a sorted set by expiry); a lease
// leaves it once, when given back or once E has passed, so a lease given
// back twice, or after it expired, gives nothing.
//
// # Why it never admits more
//
// Token bucket (Rate or Period, and Burst). The permits held in live
// leases count as still in the bucket for the burst: refill stops while
// bucket + held = Burst. Take V, the bucket plus the permits that the live
// leases have not spent. A take moves permits from the bucket to a lease
// (its p are spent at once); a lease given back moves its unspent permits
// back; an expired lease's unspent permits are lost, as spent at E; each
// permit spent takes one from V. So V never exceeds the bucket + held <=
// Burst, never falls below 0, and grows only by refill: the permits spent
// over any span of length d are at most Burst + Rate x d (interval refill:
// Burst + PerPeriod x the refills in it), in any order of spending.
//
// Fixed window (Limit per Window). A lease is valid only within the window
// it was debited in: E is at most the window's end, and in its last tenth
// of an expiry a take debits its p alone. So every permit spent in a
// window was debited in it, and the window's count (what it debited, less
// what was given back unspent while it ran) is at most Limit.
//
// Sliding log (Limit per Window). A take's p are logged at its instant, as
// the exact limiter logs a grant; its lease's permits at E, the latest
// instant they may be spent, from the debit on. An entry counts from when
// it is written until its instant + Window. A permit spent at s, in a
// lease debited at d <= s <= E, is therefore counted all along [s, s +
// Window): every window that holds s counts it. A lease given back is
// logged again at that instant, after all of its spends, with the permits
// it spent. A take is granted only when the entries counted leave room for
// it, and they only leave after: so no window of length Window holds more
// than Limit.
//
// The other algorithms are refused (ratelimit.ErrInvalidConfig). A
// sliding window could be served as the fixed window is, but is not yet: a
// lease valid only within the window (weighted) or segment (segmented) it
// was debited in keeps the counts Redis holds at or above those of the
// permits actually spent, at every instant, so every spend would pass the
// check its debit passed. A concurrency limit cannot be served by these
// leases at all: its permits are held until released, not spent, so a
// lease of them could never expire under its holders; it would take a
// block of holders renewed while any local holder holds one (as package
// redis renews its holders), a mechanism of its own.
//
// # Cost
//
// Under-admission only. A killed process strands its live lease until its
// expiry (at most what it held: a tenth of a second of its demand by
// default); a process may be refused while another holds unspent permits;
// a process over the limit asks Redis again only once a quarter of the
// batch it wants is available, or after the refusal's RetryAfter, at most
// one expiry (so it may refuse for a moment what Redis could grant); a
// fixed window's permits leased in its last moments may go unspent. A
// sliding log counts a lease's permits from its debit to its return (or
// expiry) plus Window, longer than their spends need. Under overload its
// admissions come in waves one Window apart, and each wave comes later by
// about half a lease's life, which a window of Window then lacks: so its
// leases are sized for an eighth of an expiry of demand, not a half (with
// a half, 93.5% to 95.5% of the limit per second at an expiry of 50ms; with
// an eighth, 98.3% to 100%), and its expiry is best kept a small fraction
// of the Window. Measured with three processes offering twice the limit
// (TestFleetRealClock with -hotkey.long: 10s of 1s windows, then one
// process killed), the fixed window admitted 99.1% to 100% of its limit
// in every steady window, the token bucket 99.8% to 100%, the sliding log
// 97.1% to 100%; after the kill, the fixed window and the token bucket lost
// no more than the killed process's leases held (beside the steady
// shortfall) and were back at the limit within one expiry. So was the
// sliding log on an idle machine (three runs: 98.1% to 98.6% in the steady
// windows, 98.1% to 98.8% from the kill's window on and after one
// expiry); on a machine loaded by other work it was not, in 4 of 7 runs
// (89% to 95.7% in the two seconds after the kill, one of them with a
// survivor starved of the processor, which then offered less than its
// share).
//
// Remaining is the process's view: the permits left in its lease plus what
// Redis had left at its last call, which other processes may have taken
// since. RetryAfter is a hint: when the shared state would serve the
// request if nothing else happened. Wait acquires and, after a refusal,
// sleeps until its RetryAfter and tries again: there is no queue across
// processes (a token bucket does not reserve). When Redis cannot answer a
// call that a request needs, the failure policy answers the request (see
// WithFailurePolicy); a live lease is still spent meanwhile.
//
// The state lives under keys of its own, apart from the exact limiter's on
// the same key: every process that shares a limit must use this package
// for it. A limiter does not Reconfigure, Reset or Refund.
package hotkey
