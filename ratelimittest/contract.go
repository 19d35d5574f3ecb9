package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/held"
	"github.com/limitkit/ratelimit/waittrace"
)

// Figures of TestLimiter's checks.
const (
	// contractCapacity is the capacity TestLimiter asks newLimiter for.
	contractCapacity = 3
	// contractMaxWait is the longest RetryAfter a check sleeps through;
	// a longer one is not waited for, and what it would show is not checked.
	contractMaxWait = 2 * time.Second
	// contractSlack is added to every RetryAfter the checks wait for, and
	// allowed to every grant they find early, for limiters whose clock is
	// coarser than Go's (read to the microsecond, or the millisecond).
	contractSlack = time.Millisecond
	// contractAttempts is how many times a check is run, each time on new
	// limiters, when time spoils its premise (permits came back in the middle).
	contractAttempts = 3
)

// TestLimiter checks that the limiters newLimiter makes keep the promises
// of ratelimit.Limiter and ratelimit.Lease, whatever their algorithm, in
// the manner of testing/fstest.TestFS. It returns nil when they do, and
// otherwise an error listing each broken promise. Use it in a test:
//
//	if err := ratelimittest.TestLimiter(newLimiter); err != nil {
//		t.Fatal(err)
//	}
//
// newLimiter(c) must return a new limiter, on the real clock, that grants c
// permits at once when new (it is called with a small c, 3, once or more
// per check). TestLimiter closes the limiters that implement io.Closer
// when it is done with them. Wait should be able to wait (a queue of at
// least one permit), so that its cancellation is checked; a limiter that
// refuses at once passes that check trivially.
//
// A limiter is taken to be one of two kinds, from a refusal that follows
// taking all its permits: when the refusal's RetryAfter is unknown, its
// permits come back on Release (a concurrency limit: nothing comes back
// with time); when it is known, they come back with time (a rate limit,
// whose Release does nothing). The checks, each on new limiters:
//
//   - ErrorsChangeNothing: Acquire and Wait with negative permits, more than
//     the capacity, a nil context, a cancelled one and an expired one fail
//     with ErrInvalidPermits, ErrExceedsLimit, ErrNilContext,
//     context.Canceled and context.DeadlineExceeded (errors.Is) and grant
//     nothing; afterwards the whole capacity is granted at once.
//   - ZeroPermitsTakeNothing: Acquire(ctx, 0) on a new limiter is granted and
//     takes nothing (the whole capacity is granted after it); with every
//     permit taken, it is not granted before the permits could come back.
//   - RefusalsTakeNothing: with every permit taken, refused requests of 1
//     and of all permits change nothing: the permits come back as if they
//     had not been made (on Release, or when the first refusal's RetryAfter
//     has passed).
//   - RetryAfterSuffices: when a refusal reports RetryAfter d, the same
//     request is granted once d has passed, and is not granted before
//     (checked for 1 and for all permits with all taken, and for all with
//     one taken).
//   - ReleaseIsIdempotent: releasing a lease twice, and a copy of it, gives
//     its permits back once; a rate limit's Release gives nothing back.
//   - CancelledWaitHoldsNothing: a Wait for a permit, cancelled while every
//     permit is taken, returns context.Canceled or a refusal within 2s and
//     keeps nothing: the permits come back as if it had not been made.
//   - HeldWithinCapacity: for concurrency limits, goroutines that take and
//     release permits for 100ms never hold more than the capacity at once.
//   - WaitTraceReports: a Wait granted at once tells the waittrace hooks
//     of its ctx nothing, nor does one refused at once (ReasonDeadline,
//     ReasonQueueFull) for a deadline it cannot meet; one for a permit
//     while every permit is taken tells Queued(1) while it waits (or, from
//     a limiter that knows nothing of waittrace, nothing at all) and,
//     cancelled then, Dequeued once before it returns; both with the
//     call's ctx.
//
// The checks run on the real clock and take a few seconds for a limiter
// whose permits come back within a second. They need permits, once taken,
// to stay taken for some 50ms: a check whose premise is spoilt because
// permits came back with time (a window that ended in the middle) is run
// again on new limiters, up to 3 times, and then reported. Each RetryAfter
// is waited for with 1ms of slack, for clocks coarser than Go's; one longer
// than 2s is not waited for.
func TestLimiter(newLimiter func(capacity int64) ratelimit.Limiter) error {
	var errs []error
	for _, c := range contractChecks {
		if err := runContractCheck(c.check, newLimiter); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

var contractChecks = []struct {
	name  string
	check func(newL func() ratelimit.Limiter) error
}{
	{"ErrorsChangeNothing", checkErrors},
	{"ZeroPermitsTakeNothing", checkZeroPermits},
	{"RefusalsTakeNothing", checkRefusals},
	{"RetryAfterSuffices", checkRetryAfter},
	{"ReleaseIsIdempotent", checkRelease},
	{"CancelledWaitHoldsNothing", checkCancelledWait},
	{"HeldWithinCapacity", checkHeldWithin},
	{"WaitTraceReports", checkWaitTrace},
}

// errInconclusive marks a check whose premise time spoilt.
var errInconclusive = errors.New("permits came back with time during the check")

// runContractCheck runs check on new limiters until it is conclusive, up
// to contractAttempts times, closing the limiters of each attempt.
func runContractCheck(check func(func() ratelimit.Limiter) error, newLimiter func(int64) ratelimit.Limiter) error {
	var err error
	for attempt := 0; attempt < contractAttempts; attempt++ {
		var made []ratelimit.Limiter
		err = check(func() ratelimit.Limiter {
			l := newLimiter(contractCapacity)
			made = append(made, l)
			return l
		})
		for _, l := range made {
			if c, ok := l.(io.Closer); ok {
				c.Close()
			}
		}
		if !errors.Is(err, errInconclusive) {
			return err
		}
	}
	return fmt.Errorf("%w, in each of %d attempts: the checks need permits to stay taken for some 50ms", err, contractAttempts)
}

// acquire is Acquire(ctx, permits) that also returns the time read after
// it: the decision was made before then.
func acquire(l ratelimit.Limiter, permits int) (ratelimit.Lease, time.Time, error) {
	lease, err := l.Acquire(bg, permits)
	return lease, time.Now(), err
}

// wantGranted reports an error unless Acquire(permits) is granted.
func wantGranted(l ratelimit.Limiter, permits int, why string) error {
	lease, err := l.Acquire(bg, permits)
	if err != nil {
		return fmt.Errorf("Acquire(%d) %s: %w", permits, why, err)
	}
	if !lease.Acquired() {
		return fmt.Errorf("Acquire(%d) %s: %v; want granted", permits, why, lease)
	}
	return nil
}

// refused is a refusal observed on a limiter that had just granted grant.
type refused struct {
	grant, refusal ratelimit.Lease
	ask            int
	before, after  time.Time // read around the refused call
}

// refuse takes take permits of a new limiter, then asks for ask more. It
// fails when take is not granted or ask is, which time may explain
// (errInconclusive).
func refuse(l ratelimit.Limiter, take, ask int) (refused, error) {
	r := refused{ask: ask}
	var err error
	if r.grant, err = l.Acquire(bg, take); err != nil || !r.grant.Acquired() {
		return r, fmt.Errorf("Acquire(%d) on a new limiter of capacity %d: %v, %v; want granted", take, contractCapacity, r.grant, err)
	}
	r.before = time.Now()
	r.refusal, r.after, err = acquire(l, ask)
	if err != nil {
		return r, fmt.Errorf("Acquire(%d) after Acquire(%d): %w", ask, take, err)
	}
	if r.refusal.Acquired() {
		return r, fmt.Errorf("%w: Acquire(%d) granted after Acquire(%d) on a limiter of capacity %d", errInconclusive, ask, take, contractCapacity)
	}
	return r, nil
}

// held reports whether the limiter's permits come back on Release: its
// refusal cannot say when to retry.
func (r refused) held() bool {
	_, ok := r.refusal.RetryAfter()
	return !ok
}

// early reports whether a grant of the refused request, decided before
// at, would come before the refusal's RetryAfter has passed since it was
// decided (always, for a limiter whose permits come back on Release).
func (r refused) early(at time.Time) bool {
	d, ok := r.refusal.RetryAfter()
	return !ok || at.Sub(r.before)+contractSlack < d
}

// sleepRetryAfter sleeps until the refusal's RetryAfter (and the slack) has
// passed since it was decided; false when RetryAfter is unknown or longer
// than contractMaxWait, and then it does not sleep.
func (r refused) sleepRetryAfter() bool {
	d, ok := r.refusal.RetryAfter()
	if !ok || d > contractMaxWait {
		return false
	}
	time.Sleep(time.Until(r.after.Add(d + contractSlack)))
	return true
}

// comeBack checks that what a check did while the refusal stood took
// nothing: a request of permits is granted once the grant is released (a
// concurrency limit) or once the refusal's RetryAfter has passed (a rate
// limit), where a rate limit is asked the refused request.
func (r refused) comeBack(l ratelimit.Limiter, what string) error {
	if r.held() {
		r.grant.Release()
		return wantGranted(l, contractCapacity, "after "+what+" and the release of all permits")
	}
	if !r.sleepRetryAfter() {
		return nil
	}
	d, _ := r.refusal.RetryAfter()
	return wantGranted(l, r.ask, fmt.Sprintf("after %s, once the RetryAfter %v of its first refusal had passed", what, d))
}

// notEarly checks a request that must not be granted while the refusal
// stands: Acquire(permits), where permits is at least the refused ask (or
// 0, a status check, when it asked 1).
func (r refused) notEarly(l ratelimit.Limiter, permits int, what string) error {
	lease, at, err := acquire(l, permits)
	if err != nil {
		return fmt.Errorf("Acquire(%d) %s: %w", permits, what, err)
	}
	if !lease.Acquired() {
		return nil
	}
	if r.early(at) {
		return fmt.Errorf("Acquire(%d) %s: granted, before Acquire(%d) was refused (%v) could allow it", permits, what, r.ask, r.refusal)
	}
	return fmt.Errorf("%w: Acquire(%d) granted %s", errInconclusive, permits, what)
}

func checkErrors(newL func() ratelimit.Limiter) error {
	l := newL()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	expired, cancel := context.WithDeadline(bg, time.Now().Add(-time.Second))
	defer cancel()
	var nilCtx context.Context
	cases := []struct {
		ctx     context.Context
		permits int
		want    error
	}{
		{bg, -1, ratelimit.ErrInvalidPermits},
		{bg, contractCapacity + 1, ratelimit.ErrExceedsLimit},
		{nilCtx, 1, ratelimit.ErrNilContext},
		{cancelled, 1, context.Canceled},
		{expired, 1, context.DeadlineExceeded},
	}
	var errs []error
	for _, c := range cases {
		for _, m := range []struct {
			name string
			call func(context.Context, int) (ratelimit.Lease, error)
		}{{"Acquire", l.Acquire}, {"Wait", l.Wait}} {
			lease, err := m.call(c.ctx, c.permits)
			if !errors.Is(err, c.want) || lease.Acquired() {
				errs = append(errs, fmt.Errorf("%s(%s, %d) = %v, %v; want an error that is %v", m.name, ctxName(c.ctx), c.permits, lease, err, c.want))
			}
		}
	}
	if err := wantGranted(l, contractCapacity, "after the calls that fail"); err != nil {
		errs = append(errs, fmt.Errorf("%w: a call that fails must change nothing", err))
	}
	return errors.Join(errs...)
}

func ctxName(ctx context.Context) string {
	switch {
	case ctx == nil:
		return "nil"
	case ctx.Err() != nil:
		return "done ctx"
	}
	return "ctx"
}

func checkZeroPermits(newL func() ratelimit.Limiter) error {
	l := newL()
	for i := 0; i < 3; i++ {
		if err := wantGranted(l, 0, "on a new limiter"); err != nil {
			return err
		}
	}
	if err := wantGranted(l, contractCapacity, "after three Acquire(0)"); err != nil {
		return fmt.Errorf("%w: permits == 0 must take nothing", err)
	}
	l = newL()
	r, err := refuse(l, contractCapacity, 1)
	if err != nil {
		return err
	}
	return r.notEarly(l, 0, "with every permit taken")
}

func checkRefusals(newL func() ratelimit.Limiter) error {
	l := newL()
	r, err := refuse(l, contractCapacity, 1)
	if err != nil {
		return err
	}
	for i := 0; i < 5; i++ {
		for _, p := range []int{1, contractCapacity} {
			if err := r.notEarly(l, p, "with every permit taken"); err != nil {
				return err
			}
		}
	}
	if err := r.comeBack(l, "11 refusals"); err != nil {
		return fmt.Errorf("%w: a refusal must take nothing", err)
	}
	return nil
}

func checkRetryAfter(newL func() ratelimit.Limiter) error {
	for _, c := range []struct{ take, ask int }{{contractCapacity, 1}, {contractCapacity, contractCapacity}, {1, contractCapacity}} {
		l := newL()
		r, err := refuse(l, c.take, c.ask)
		if err != nil {
			return err
		}
		if r.held() {
			return nil // no RetryAfter to check
		}
		if err := r.notEarly(l, c.ask, "again, at once"); err != nil {
			return err
		}
		if !r.sleepRetryAfter() {
			continue
		}
		d, _ := r.refusal.RetryAfter()
		if err := wantGranted(l, c.ask, fmt.Sprintf("after Acquire(%d), once the RetryAfter %v of its refusal had passed", c.take, d)); err != nil {
			return err
		}
	}
	return nil
}

func checkRelease(newL func() ratelimit.Limiter) error {
	l := newL()
	r, err := refuse(l, 1, contractCapacity)
	if err != nil {
		return err
	}
	if !r.held() {
		for i := 0; i < 2; i++ {
			r.grant.Release()
		}
		return r.notEarly(l, contractCapacity, "after the release of a rate limit's lease")
	}
	// 1 permit held by r.grant, the rest by rest: once r.grant is
	// released (twice, and a copy of it), exactly 1 is free.
	rest, err := l.Acquire(bg, contractCapacity-1)
	if err != nil || !rest.Acquired() {
		return fmt.Errorf("Acquire(%d) with 1 permit of %d taken: %v, %v; want granted", contractCapacity-1, contractCapacity, rest, err)
	}
	grant := r.grant
	r.grant.Release()
	r.grant.Release()
	grant.Release()
	if lease, err := l.Acquire(bg, 2); err != nil || lease.Acquired() {
		return fmt.Errorf("Acquire(2) with %d of %d permits held, after a lease of 1 was released twice and through a copy: %v, %v; want refused: Release must give its permits back once", contractCapacity-1, contractCapacity, lease, err)
	}
	return wantGranted(l, 1, "after the release of a lease of 1")
}

func checkCancelledWait(newL func() ratelimit.Limiter) error {
	l := newL()
	r, err := refuse(l, contractCapacity, 1)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(bg)
	type result struct {
		lease ratelimit.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		lease, err := l.Wait(ctx, 1)
		done <- result{lease, err}
	}()
	time.Sleep(5 * time.Millisecond)
	cancel()
	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Second):
		return fmt.Errorf("Wait(ctx, 1) did not return within 2s of ctx's cancellation")
	}
	switch {
	case res.err != nil && !errors.Is(res.err, context.Canceled):
		return fmt.Errorf("Wait(ctx, 1) cancelled with every permit taken: %w; want context.Canceled or a refusal", res.err)
	case res.err == nil && res.lease.Acquired():
		res.lease.Release()
		if r.held() {
			return fmt.Errorf("Wait(ctx, 1) granted with every permit held")
		}
		return fmt.Errorf("%w: Wait(ctx, 1) granted", errInconclusive)
	}
	if err := r.comeBack(l, "a cancelled Wait(ctx, 1)"); err != nil {
		return fmt.Errorf("%w: a cancelled Wait must hold nothing", err)
	}
	return nil
}

// checkHeldWithin has 16 goroutines take 1 or 2 permits, hold them 50µs
// and release them, for 100ms, counting those held between each grant's
// return and its release.
func checkHeldWithin(newL func() ratelimit.Limiter) error {
	r, err := refuse(newL(), contractCapacity, 1)
	if err != nil {
		return err
	}
	if !r.held() {
		return nil // a rate limit's bounds depend on its algorithm
	}
	return held.Within(newL(), contractCapacity, 16, 100*time.Millisecond, 50*time.Microsecond)
}

// bg is the context of the checks' calls.
var bg = context.Background()

// watchKey marks the ctx of the Waits a QueueLog observes in the checks.
type watchKey struct{}

// watching returns a QueueLog and the ctx, carrying its hooks, that marks
// its Waits.
func watching() (*QueueLog, context.Context) {
	w := new(QueueLog)
	return w, waittrace.WithHooks(context.WithValue(bg, watchKey{}, w), w.Hooks())
}

// nothing fails unless w was told nothing, of a Wait described by what.
func nothing(w *QueueLog, what string) error {
	if q, d := w.Told(); len(q)+len(d) != 0 {
		return fmt.Errorf("%s told its hooks Queued %d times, Dequeued %d times; want nothing", what, len(q), len(d))
	}
	return nil
}

// once fails unless w was told, in its ctx, Queued(1) once and then,
// before the call returned, Dequeued once with what it returned (lease,
// err), after a time in the queue within took.
func once(w *QueueLog, lease ratelimit.Lease, err error, took time.Duration) error {
	q, d := w.Told()
	foreign := 0
	for _, e := range append(q, d...) {
		if e.Ctx.Value(watchKey{}) != w {
			foreign++
		}
	}
	switch {
	case len(q) != 1 || q[0].Permits != 1:
		return fmt.Errorf("a Wait(ctx, 1) that queued told its hooks Queued %d times (permits %v); want once, 1", len(q), q)
	case len(d) != 1:
		return fmt.Errorf("a Wait(ctx, 1) that queued told its hooks Dequeued %d times before it returned; want once", len(d))
	case d[0].Permits != 1 || d[0].Granted != lease.Acquired() || d[0].Err != err:
		return fmt.Errorf("Dequeued(%d, _, granted %v, %v); want Dequeued(1, _, granted %v, %v), what Wait returned", d[0].Permits, d[0].Granted, d[0].Err, lease.Acquired(), err)
	case d[0].Queued < 0 || d[0].Queued > took+contractSlack:
		return fmt.Errorf("Dequeued with %v queued, for a call that took %v", d[0].Queued, took)
	case foreign != 0:
		return fmt.Errorf("the hooks were called %d times with a ctx other than Wait's", foreign)
	}
	return nil
}

func checkWaitTrace(newL func() ratelimit.Limiter) error {
	l := newL()
	w, wctx := watching()
	if lease, err := l.Wait(wctx, 1); err != nil || !lease.Acquired() {
		return fmt.Errorf("Wait(ctx, 1) on a new limiter: %v, %v; want a grant", lease, err)
	}
	if err := nothing(w, "Wait(ctx, 1) granted at once"); err != nil {
		return err
	}

	// Refused at once for its deadline: nothing to tell.
	l = newL()
	if _, err := refuse(l, contractCapacity, 1); err != nil {
		return err
	}
	w, wctx = watching()
	ctx, cancel := context.WithTimeout(wctx, time.Millisecond)
	start := time.Now()
	lease, err := l.Wait(ctx, 1)
	took := time.Since(start)
	cancel()
	if r := lease.Reason(); err == nil && (r == ratelimit.ReasonDeadline || r == ratelimit.ReasonQueueFull) {
		if err := nothing(w, fmt.Sprintf("Wait(ctx, 1) refused at once (%v)", r)); err != nil {
			return err
		}
	} else if q, _ := w.Told(); len(q) != 0 {
		if err := once(w, lease, err, took); err != nil {
			return err
		}
	}

	// Queued, then cancelled.
	l = newL()
	_, err = refuse(l, contractCapacity, 1)
	if err != nil {
		return err
	}
	w, wctx = watching()
	ctx, cancel = context.WithCancel(wctx)
	defer cancel()
	type result struct {
		lease ratelimit.Lease
		err   error
	}
	done := make(chan result, 1)
	start = time.Now()
	go func() {
		lease, err := l.Wait(ctx, 1)
		done <- result{lease, err}
	}()
	var res result
	select {
	case <-w.Joined():
		cancel()
		select {
		case res = <-done:
		case <-time.After(2 * time.Second):
			return fmt.Errorf("Wait(ctx, 1) did not return within 2s of ctx's cancellation")
		}
	case res = <-done: // answered without waiting for ctx
	case <-time.After(500 * time.Millisecond):
		// Not told it queued: a limiter that tells nothing, or one that
		// forgot to. Either must tell nothing at all.
		cancel()
		select {
		case res = <-done:
		case <-time.After(2 * time.Second):
			return fmt.Errorf("Wait(ctx, 1) with every permit taken did not return within 2s of ctx's cancellation")
		}
	}
	if res.err == nil && res.lease.Acquired() {
		res.lease.Release()
	}
	if q, _ := w.Told(); len(q) == 0 {
		return nothing(w, "Wait(ctx, 1) that did not tell Queued") // a limiter that does not queue, or does not tell
	}
	return once(w, res.lease, res.err, time.Since(start))
}
