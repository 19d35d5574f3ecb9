package redis

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// The server sleeps pauseFor (DEBUG SLEEP); a call bounded by callTimeout
// must answer within answerWithin: generous for a loaded 2-core machine,
// clearly below pauseFor.
const (
	pauseFor     = time.Second
	callTimeout  = 100 * time.Millisecond
	answerWithin = 400 * time.Millisecond
)

// debugServer starts a real redis-server that accepts DEBUG (Redis 7 needs
// enable-debug-command; older servers have no such option and allow it).
func debugServer(t *testing.T) string {
	t.Helper()
	if s, err := redistest.StartServer(t.TempDir(), "--enable-debug-command", "local"); err == nil {
		t.Cleanup(s.Stop)
		return s.Addr
	}
	return redistest.Start(t).Addr
}

// pause makes the server at addr sleep pauseFor, from a connection of its
// own, and returns a channel closed when it has woken. It waits until the
// sleep has begun.
func pause(t *testing.T, addr string) <-chan struct{} {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
	probe := goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
	if err := probe.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	woken := make(chan struct{})
	go func() {
		defer close(woken)
		defer c.Close()
		if err := c.Do(context.Background(), "DEBUG", "SLEEP", pauseFor.Seconds()).Err(); err != nil {
			t.Errorf("DEBUG SLEEP: %v", err)
		}
	}()
	// The server is asleep once a PING of the probe's takes more than a
	// moment (timed here: go-redis may not honour a ctx while reading).
	for start := time.Now(); time.Since(start) < pauseFor/2; {
		pong := make(chan struct{})
		go func() {
			defer close(pong)
			probe.Ping(context.Background())
		}()
		select {
		case <-pong:
			continue
		case <-time.After(20 * time.Millisecond):
		}
		t.Cleanup(func() {
			<-woken
			<-pong
			probe.Close()
		})
		return woken
	}
	<-woken
	probe.Close()
	t.Fatal("the server did not go to sleep")
	return nil
}

// TestTimeoutBoundsEveryCall: with a server asleep for a second, every
// call of a limiter with WithTimeout(100ms) answers within the timeout
// (plus slack for a loaded machine), under every failure policy, and
// FailError's error is both ErrUnavailable and context.DeadlineExceeded;
// with a go-redis client of default options (ContextTimeoutEnabled unset,
// so go-redis ignores deadlines while reading: calls run in goroutines),
// and with ContextTimeoutEnabled (calls run on their callers' goroutines).
// Refund, Wait (a token bucket's reservation, and a window's retry) and
// StatsContext are bounded too; the calls left behind finish once the
// server answers (goleak checks).
func TestTimeoutBoundsEveryCall(t *testing.T) {
	t.Run("DefaultOptions", func(t *testing.T) {
		timeoutBoundsEveryCall(t, goredis.Options{PoolSize: 32})
	})
	t.Run("ContextTimeoutEnabled", func(t *testing.T) {
		timeoutBoundsEveryCall(t, goredis.Options{PoolSize: 32, ContextTimeoutEnabled: true})
	})
}

func timeoutBoundsEveryCall(t *testing.T, o goredis.Options) {
	addr := debugServer(t)
	o.Addr = addr
	c := goredis.NewClient(&o)
	t.Cleanup(func() { c.Close() })
	if direct := honoursDeadlines(c); direct != o.ContextTimeoutEnabled {
		t.Fatalf("honoursDeadlines = %v with ContextTimeoutEnabled %v", direct, o.ContextTimeoutEnabled)
	}
	ctx := context.Background()
	fw := fixedwindow.Config{Limit: 1000, Window: time.Hour}
	tb := tokenbucket.Config{Rate: 1000, Burst: 1000}
	mk := func(key string, cfg ratelimit.Config, opts ...Option) *Limiter {
		l, err := New(c, key, cfg, append(opts, WithTimeout(callTimeout))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	errL := mk("to-error", fw)
	openL := mk("to-open", fw, WithFailurePolicy(FailOpen))
	closedL := mk("to-closed", fw, WithFailurePolicy(FailClosed))
	noCoalesce := mk("to-nocoalesce", fw, WithoutCoalescing())
	waitTB := mk("to-wait-tb", tb)
	waitFW := mk("to-wait-fw", fw)
	refundL := mk("to-refund", fw)
	granted := map[*Limiter]ratelimit.Lease{}
	for _, l := range []*Limiter{errL, openL, closedL, noCoalesce, waitTB, waitFW, refundL} {
		lease, err := l.Acquire(ctx, 1) // loads the scripts, opens connections
		if err != nil || !lease.Acquired() {
			t.Fatalf("before the pause: %v %v", lease, err)
		}
		granted[l] = lease
	}

	isTimeout := func(err error) bool {
		return errors.Is(err, ErrUnavailable) && errors.Is(err, context.DeadlineExceeded)
	}
	checks := []struct {
		name  string
		call  func() (ratelimit.Lease, error)
		check func(ratelimit.Lease, error) bool
	}{
		{"FailError", func() (ratelimit.Lease, error) { return errL.Acquire(ctx, 1) },
			func(_ ratelimit.Lease, err error) bool { return isTimeout(err) }},
		{"FailOpen", func() (ratelimit.Lease, error) { return openL.Acquire(ctx, 1) },
			func(l ratelimit.Lease, err error) bool { // a grant with no limit applied, and no figures
				return err == nil && l.Acquired() && l.Limit() == -1 && l.Remaining() == -1
			}},
		{"FailClosed", func() (ratelimit.Lease, error) { return closedL.Acquire(ctx, 1) },
			func(l ratelimit.Lease, err error) bool {
				return err == nil && !l.Acquired() && l.Reason() == ratelimit.ReasonUnavailable
			}},
		{"WithoutCoalescing", func() (ratelimit.Lease, error) { return noCoalesce.Acquire(ctx, 1) },
			func(_ ratelimit.Lease, err error) bool { return isTimeout(err) }},
		{"Wait/tokenbucket", func() (ratelimit.Lease, error) { return waitTB.Wait(ctx, 1) },
			func(_ ratelimit.Lease, err error) bool { return isTimeout(err) }},
		{"Wait/fixedwindow", func() (ratelimit.Lease, error) { return waitFW.Wait(ctx, 1) },
			func(_ ratelimit.Lease, err error) bool { return isTimeout(err) }},
		{"Refund", func() (ratelimit.Lease, error) { return ratelimit.Lease{}, refundL.Refund(ctx, granted[refundL], 1) },
			func(_ ratelimit.Lease, err error) bool { return isTimeout(err) }},
		{"StatsContext", func() (ratelimit.Lease, error) { _, err := errL.StatsContext(ctx); return ratelimit.Lease{}, err },
			func(_ ratelimit.Lease, err error) bool { return isTimeout(err) }},
		{"Stats", func() (ratelimit.Lease, error) {
			if s := errL.Stats(); s != (ratelimit.Stats{}) {
				return ratelimit.Lease{}, errors.New("Stats answered while the server slept")
			}
			return ratelimit.Lease{}, nil
		}, func(_ ratelimit.Lease, err error) bool { return err == nil }},
	}

	woken := pause(t, addr)
	var wg sync.WaitGroup
	for _, ch := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			lease, err := ch.call()
			took := time.Since(start)
			if took > answerWithin {
				t.Errorf("%s: answered after %v, want within about %v (server asleep for %v)", ch.name, took, callTimeout, pauseFor)
			}
			if !ch.check(lease, err) {
				t.Errorf("%s: %v, %v after %v: not the failure policy's answer to a timeout", ch.name, lease, err, took)
			}
		}()
	}
	wg.Wait()

	// A caller's ctx ending first is reported as the caller's.
	cctx, cancel := context.WithTimeout(ctx, callTimeout/4)
	defer cancel()
	if _, err := errL.Acquire(cctx, 1); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Errorf("caller's own deadline while asleep: %v, want the ctx's error", err)
	}

	<-woken
	for _, l := range []*Limiter{errL, openL, closedL, noCoalesce, waitTB, waitFW} {
		var lease ratelimit.Lease
		var err error
		for i := 0; i < 50; i++ {
			if lease, err = l.Acquire(ctx, 1); err == nil && lease.Reason() != ratelimit.ReasonUnavailable {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || !lease.Acquired() {
			t.Errorf("after the server woke: %v %v", lease, err)
		}
	}
}

// TestDefaultTimeout: without WithTimeout, a call is bounded by
// DefaultTimeout (1s), whatever the client's own options.
func TestDefaultTimeout(t *testing.T) {
	if DefaultTimeout != time.Second {
		t.Fatalf("DefaultTimeout = %v, want the documented 1s", DefaultTimeout)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	l, err := New(c, "k", fixedwindow.Config{Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.o.timeout != DefaultTimeout {
		t.Fatalf("timeout %v, want DefaultTimeout", l.o.timeout)
	}
}

// TestSenderHonoursItsOwnCtx: a caller that finds a sender free and calls
// queued becomes the batch's sender; its own deadline still holds while the
// server sleeps (it answers with its ctx's error within the deadline), and
// the batch it started, bounded by the limiter's timeout rather than by
// that caller's ctx, still answers the other caller once the server wakes.
func TestSenderHonoursItsOwnCtx(t *testing.T) {
	addr := debugServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	l, err := New(c, "sender", fixedwindow.Config{Limit: 10, Window: time.Hour}, WithTimeout(3*pauseFor))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if lease, err := l.Acquire(context.Background(), 1); err != nil || !lease.Acquired() {
		t.Fatalf("before the pause: %v %v", lease, err)
	}
	b := l.pipe
	// Another caller's decision waits in the queue, a batch is in flight
	// (pretended), and one sender's place is free.
	other := &pending{d: l.job(l.own(l.localNow(), opAcquire, 1, nil)), done: make(chan struct{})}
	b.mu.Lock()
	b.senders = maxSenders - 1
	b.queue = append(b.queue, other)
	b.mu.Unlock()

	woken := pause(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(ctx, 1)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Errorf("sender's Acquire: %v, want its own ctx's error", err)
	}
	if took > answerWithin {
		t.Errorf("sender answered after %v, want within about its %v deadline", took, callTimeout)
	}
	<-woken
	select {
	case <-other.done:
		if r, err := parseReply(other.v); other.err != nil || err != nil || !r.granted {
			t.Errorf("the other caller's answer: %+v %v %v, want a grant", r, other.err, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other caller got no answer after the server woke")
	}
	for { // the sending goroutine gives its place back
		b.mu.Lock()
		n := b.senders
		if n == maxSenders-1 {
			b.senders = 0
		}
		b.mu.Unlock()
		if n == maxSenders-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
}

// TestErrorsWrapTheirCause: ErrUnavailable wraps the failure itself, so
// errors.Is and errors.As find it (a dial error here: the server is gone).
func TestErrorsWrapTheirCause(t *testing.T) {
	s, err := redistest.StartServer(t.TempDir())
	if err != nil {
		t.Skip(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l, err := New(c, "wrap", fixedwindow.Config{Limit: 1, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s.Stop()
	var opErr *net.OpError
	_, err = l.Acquire(context.Background(), 1)
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &opErr) {
		t.Errorf("Acquire with the server gone: %v, want ErrUnavailable wrapping a *net.OpError", err)
	}
	if _, err := l.StatsContext(context.Background()); !errors.Is(err, ErrUnavailable) || !errors.As(err, &opErr) {
		t.Errorf("StatsContext with the server gone: %v, want ErrUnavailable wrapping a *net.OpError", err)
	}
}

// TestHonoursDeadlines: a call runs on its caller's goroutine only with a
// client that stops reading at a ctx's deadline: ContextTimeoutEnabled,
// and socket deadlines not disabled (-2).
func TestHonoursDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
		want   bool
	}{
		{"client", goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true}), true},
		{"client/no-read-deadline", goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true, ReadTimeout: -1}), true},
		{"client/deadlines-disabled", goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"client/default", goredis.NewClient(&goredis.Options{}), false},
		{"cluster", goredis.NewClusterClient(&goredis.ClusterOptions{ContextTimeoutEnabled: true}), true},
		{"cluster/deadlines-disabled", goredis.NewClusterClient(&goredis.ClusterOptions{ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"cluster/default", goredis.NewClusterClient(&goredis.ClusterOptions{}), false},
		{"ring", goredis.NewRing(&goredis.RingOptions{ContextTimeoutEnabled: true}), true},
		{"ring/deadlines-disabled", goredis.NewRing(&goredis.RingOptions{ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"ring/default", goredis.NewRing(&goredis.RingOptions{}), false},
	} {
		if got := honoursDeadlines(tc.client); got != tc.want {
			t.Errorf("%s: honoursDeadlines = %v, want %v", tc.name, got, tc.want)
		}
		tc.client.Close()
	}
}

// stallProxy forwards loopback connections to a server until stall is
// called; from then on the connections it already had drop everything (a
// half-open link: no reply, no error), while new ones forward again.
type stallProxy struct {
	ln      net.Listener
	stalled atomic.Int64 // connections accepted before stall: 1 + their last number
	mu      sync.Mutex
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
	go func() {
		for n := int64(1); ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			pump := func(dst, src net.Conn) {
				buf := make([]byte, 4096)
				for {
					k, err := src.Read(buf)
					if err != nil {
						return
					}
					if n >= p.stalled.Load() {
						dst.Write(buf[:k])
					}
				}
			}
			go pump(s, c)
			go pump(c, s)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

// stall black-holes the connections accepted so far.
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled.Store(int64(len(p.conns)/2) + 1)
}

// TestStalledConnectionHoldsNoSender: calls stalled on half-open
// connections, with a client that never times a read out (ReadTimeout -1,
// ContextTimeoutEnabled unset), fail at the limiter's timeout and hold none
// of the pipe's senders: once new connections work, every call on the
// client succeeds again.
func TestStalledConnectionHoldsNoSender(t *testing.T) {
	p := newStallProxy(t, redistest.Start(t).Addr)
	c := goredis.NewClient(&goredis.Options{Addr: p.ln.Addr().String(), ReadTimeout: -1, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	l, err := New(c, "stalled", fixedwindow.Config{Limit: 1 << 30, Window: time.Hour}, WithTimeout(callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ { // open several connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Acquire(ctx, 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	p.stall()
	var failed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Acquire(ctx, 1); errors.Is(err, context.DeadlineExceeded) {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() == 0 {
		t.Fatal("no call met a stalled connection")
	}
	for i := 0; i < 20; i++ {
		if lease, err := l.Acquire(ctx, 1); err != nil || !lease.Acquired() {
			t.Fatalf("call %d after new connections work again: %v %v", i, lease, err)
		}
	}
}
