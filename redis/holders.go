package redis

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// holderName is the name under which holder number n is recorded in
// Redis; "" for 0 (no holder).
func (l *Limiter) holderName(n uint64) string {
	if n == 0 {
		return ""
	}
	return l.ext().id + "-" + strconv.FormatUint(n, 36)
}

// holderID names a new holder.
func (l *Limiter) holderID() string { return l.holderName(l.ext().seq.Add(1)) }

// holder is a held concurrency lease, number n of its limiter: release
// removes it from Redis.
type holder struct {
	l        *Limiter
	n        uint64
	id       string
	permits  int64
	released atomic.Bool
}

// hold records holder number n of p permits, granted by Redis; false when
// the limiter was closed meanwhile (Close may have released its holders
// already), in which case the holder is released at once.
func (l *Limiter) hold(n uint64, p int64) bool {
	h := &holder{l: l, n: n, id: l.holderName(n), permits: p}
	x := l.ext()
	x.holders.Store(n, h)
	if x.nHolders.Add(1) == 1 {
		l.startRenewal()
	}
	if l.isClosed() {
		h.release()
		return false
	}
	return true
}

// releaser is the Releaser of a limiter's concurrency leases, whose token
// is the holder's number: one LeaseInfo serves every lease.
type releaser Limiter

// Release releases holder number n; only its first call has an effect.
func (r *releaser) Release(n uint64) {
	if h, ok := (*Limiter)(r).ext().holders.Load(n); ok {
		h.(*holder).release()
	}
}

func (h *holder) release() {
	if !h.released.CompareAndSwap(false, true) {
		return
	}
	x := h.l.ext()
	x.holders.Delete(h.n)
	if x.nHolders.Add(-1) == 0 {
		h.l.stopRenewal()
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(h.l.o.timeout, 5*time.Second))
	defer cancel()
	if _, err := h.l.call(ctx, h.l.localNow(), opRelease, h.permits, h.id); err != nil {
		h.l.failed(err) // the holder expires after the lease TTL
	}
}

// Lease renewal: one renewer per client (the goredis.UniversalClient value)
// with limiters holding leases, one goroutine each. Each such limiter has a
// timer on its own clock that puts it in its renewer's due list every
// TTL/3; the renewer's goroutine renews every lease of the limiters due, a
// pipeline of at most renewBatch script calls per round trip, and exits
// (leaving the registry) when no limiter of its client holds a lease.
var (
	renewMu  sync.Mutex
	renewers = map[goredis.UniversalClient]*renewer{}
)

// renewBatch bounds the renewals sent in one pipelined round trip.
const renewBatch = 256

type renewer struct {
	client goredis.UniversalClient
	n      int        // limiters registered; guarded by renewMu
	due    []*Limiter // guarded by renewMu
	wake   chan struct{}
}

// startRenewal registers l with its client's renewer, starting it if
// needed, once l holds a lease.
func (l *Limiter) startRenewal() {
	renewMu.Lock()
	defer renewMu.Unlock()
	x := l.ext()
	if x.renewer != nil || x.nHolders.Load() == 0 || l.isClosed() {
		return
	}
	r := renewers[l.client]
	if r == nil {
		r = &renewer{client: l.client, wake: make(chan struct{}, 1)}
		renewers[l.client] = r
		go r.run()
	}
	r.n++
	x.renewer = r
	l.schedule()
}

// stopRenewal unregisters l once it holds no lease or is closed.
func (l *Limiter) stopRenewal() {
	renewMu.Lock()
	defer renewMu.Unlock()
	x := l.ext()
	r := x.renewer
	if r == nil || (x.nHolders.Load() != 0 && !l.isClosed()) {
		return
	}
	x.renewer = nil
	if x.renewStop != nil {
		x.renewStop()
	}
	if r.n--; r.n == 0 {
		r.signal()
	}
}

// schedule sets l's renewal timer to TTL/3 from now on l's clock; under
// renewMu.
func (l *Limiter) schedule() {
	d, x := l.o.leaseTTL/3, l.ext()
	if x.renewStop != nil {
		x.renewStop()
	}
	if l.o.clock != nil {
		x.renewStop = l.o.clock.AfterFunc(d, l.renewDue)
	} else {
		x.renewStop = time.AfterFunc(d, l.renewDue).Stop
	}
}

// renewDue puts l in its renewer's due list (its timer's function).
func (l *Limiter) renewDue() {
	renewMu.Lock()
	defer renewMu.Unlock()
	x := l.ext()
	r := x.renewer
	if r == nil || x.renewQueued {
		return
	}
	x.renewQueued = true
	r.due = append(r.due, l)
	r.signal()
}

func (r *renewer) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *renewer) run() {
	for range r.wake {
		renewMu.Lock()
		due := r.due
		r.due = nil
		for _, l := range due {
			l.ext().renewQueued = false
		}
		if r.n == 0 {
			delete(renewers, r.client)
			renewMu.Unlock()
			return
		}
		live := due[:0]
		for _, l := range due {
			if l.ext().renewer == r {
				l.schedule() // the next renewal, TTL/3 from this one
				live = append(live, l)
			}
		}
		renewMu.Unlock()
		r.renew(live)
	}
}

type renewal struct {
	l    *Limiter
	call evalCall
}

// renew extends every lease held by the limiters due, in pipelined round
// trips of at most renewBatch script calls. A failure is not retried before
// the next renewal: a lease lives TTL, renewed every TTL/3.
func (r *renewer) renew(due []*Limiter) {
	batch := make([]renewal, 0, renewBatch)
	for _, l := range due {
		if l.isClosed() {
			continue
		}
		l.ext().holders.Range(func(_, v any) bool {
			h := v.(*holder)
			batch = append(batch, renewal{l, l.lone(l.own(l.localNow(), opRenew, h.permits, []interface{}{h.id}))})
			if len(batch) == renewBatch {
				r.send(batch)
				batch = batch[:0]
			}
			return true
		})
	}
	if len(batch) > 0 {
		r.send(batch)
	}
}

func (r *renewer) send(batch []renewal) {
	var timeout time.Duration
	calls := make([]evalCall, len(batch))
	for i, x := range batch {
		d := x.l.o.timeout
		if d <= 0 {
			d = x.l.o.leaseTTL / 3
		}
		timeout = max(timeout, d)
		calls[i] = x.call
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	evalAll(ctx, r.client, calls)
}
