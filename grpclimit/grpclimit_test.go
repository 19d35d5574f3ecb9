package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/grpclimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// global is one memory limiter of cfg for every key.
func global(t *testing.T, cfg ratelimit.Config, clock ratelimit.Clock) ratelimit.Keyed {
	t.Helper()
	opts := []memory.Option{}
	if clock != nil {
		opts = append(opts, memory.WithClock(clock))
	}
	l, err := memory.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return partitioned.Global(l)
}

// server serves the health service on a real loopback TCP port, behind a
// counter of the calls that reach it and then the limiter's interceptors.
// It returns the server's address and the count.
func server(t *testing.T, l ratelimit.Keyed, o grpclimit.ServerOptions) (string, *atomic.Int64) {
	t.Helper()
	unary, err := grpclimit.UnaryServerInterceptor(l, o)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := grpclimit.StreamServerInterceptor(l, o)
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		hits.Add(1)
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		hits.Add(1)
		return h(srv, ss)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(count, unary), grpc.ChainStreamInterceptor(countStream, stream))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(func() {
		hs.Shutdown()
		s.Stop()
	})
	return lis.Addr().String(), &hits
}

// dial connects to addr with the client's interceptors (none when c is nil).
func dial(t *testing.T, addr string, c *grpclimit.Client) healthpb.HealthClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if c != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// retryInfo is the RetryInfo delay of err's status, and whether it has one.
func retryInfo(err error) (time.Duration, bool) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

func check(ctx context.Context, hc healthpb.HealthClient, opts ...grpc.CallOption) error {
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

// watch opens a server stream and reads its first message.
func watch(ctx context.Context, hc healthpb.HealthClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = w.Recv()
	return err
}

// TestServerRefuses: over the limit, unary calls and streams get
// ResourceExhausted with a RetryInfo and retry-after metadata.
func TestServerRefuses(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Unix(3600*1000, 0).Add(59*time.Minute + 30*time.Second))
	addr, hits := server(t, global(t, fixedwindow.Config{Limit: 2, Window: time.Hour}, clock), grpclimit.ServerOptions{})
	hc := dial(t, addr, nil)
	ctx := context.Background()
	if err := check(ctx, hc); err != nil {
		t.Fatal(err)
	}
	if err := watch(ctx, hc); err != nil {
		t.Fatal(err)
	}
	var header metadata.MD
	err := check(ctx, hc, grpc.Header(&header))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	if d, ok := retryInfo(err); !ok || d != 30*time.Second {
		t.Fatalf("RetryInfo %v %v, want 30s", d, ok)
	}
	if got := header.Get("retry-after"); len(got) != 1 || got[0] != "30" {
		t.Fatalf("retry-after metadata %v, want 30", got)
	}
	err = watch(ctx, hc)
	if d, ok := retryInfo(err); status.Code(err) != codes.ResourceExhausted || !ok || d != 30*time.Second {
		t.Fatalf("refused stream: %v (RetryInfo %v %v)", err, d, ok)
	}
	if hits.Load() != 4 {
		t.Fatalf("hits %d", hits.Load())
	}
}

// holdStream opens a stream on hc and reads its first message: its
// handler runs, holding a concurrency permit, until cancel is called.
func holdStream(t *testing.T, hc healthpb.HealthClient) (cancel context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return cancel
}

// TestServerConcurrency: a concurrency permit is held while the handler
// runs (a stream stays open), and its refusal has no RetryInfo.
func TestServerConcurrency(t *testing.T) {
	addr, _ := server(t, global(t, concurrency.Config{Limit: 1}, nil), grpclimit.ServerOptions{})
	hc := dial(t, addr, nil)
	cancel := holdStream(t, hc)
	err := check(context.Background(), hc)
	if _, ok := retryInfo(err); status.Code(err) != codes.ResourceExhausted || ok {
		t.Fatalf("call while the stream holds the permit: %v, want ResourceExhausted without RetryInfo", err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for check(context.Background(), hc) != nil { // the handler returns once the cancel arrives
		if time.Now().After(deadline) {
			t.Fatal("the stream's permit never came back")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestClientLearns: a client interceptor that got a refusal with a
// RetryInfo pauses that method on that target, for unary calls and
// streams, and says why with ErrRateLimited and a ResourceExhausted
// status of its own.
func TestClientLearns(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Unix(3600*1000, 0))
	perMethod, err := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			return memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour}, memory.WithClock(clock))
		},
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer perMethod.Close()
	addr, hits := server(t, perMethod, grpclimit.ServerOptions{Key: grpclimit.Method()})
	c := &grpclimit.Client{FailFast: true, Clock: clock}
	hc := dial(t, addr, c)
	ctx := context.Background()
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if err := check(ctx, hc); status.Code(err) != want || errors.Is(err, grpclimit.ErrRateLimited) {
			t.Fatalf("call %d: %v, want %v from the server", i, err, want)
		}
	}
	err = check(ctx, hc)
	var rl *grpclimit.RateLimitedError
	if !errors.As(err, &rl) || !errors.Is(err, grpclimit.ErrRateLimited) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after the refusal: %v, want a local refusal", err)
	}
	if d, ok := rl.RetryAfter(); !ok || d != time.Hour {
		t.Fatalf("local RetryAfter %v %v, want 1h", d, ok)
	}
	if d, ok := retryInfo(err); !ok || d != time.Hour {
		t.Fatalf("local RetryInfo %v %v, want 1h", d, ok)
	}
	if hits.Load() != 3 {
		t.Fatalf("hits %d, want 3: the fourth call is not sent", hits.Load())
	}

	// Streams are keyed by their own method, and learn from a refusal
	// that arrives with the first message.
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if err := watch(ctx, hc); status.Code(err) != want || errors.Is(err, grpclimit.ErrRateLimited) {
			t.Fatalf("stream %d: %v, want %v from the server", i, err, want)
		}
	}
	if err := watch(ctx, hc); !errors.Is(err, grpclimit.ErrRateLimited) || hits.Load() != 6 {
		t.Fatalf("stream after the refusal: %v, hits %d; want a local refusal, 6 hits", err, hits.Load())
	}

	// The pause ends with the server's window.
	clock.Advance(time.Hour)
	if err := check(ctx, hc); err != nil {
		t.Fatalf("after the pause: %v", err)
	}

	// Waiting mode: a deadline before the pause's end is refused at once;
	// without a deadline the call waits the pause out.
	wc := &grpclimit.Client{}
	addr2, hits2 := server(t, global(t, tokenbucket.Config{Rate: 10, Burst: 1}, nil), grpclimit.ServerOptions{})
	hc2 := dial(t, addr2, wc)
	check(ctx, hc2)
	if err := check(ctx, hc2); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := check(short, hc2); !errors.Is(err, grpclimit.ErrRateLimited) {
		t.Fatalf("deadline before the pause's end: %v", err)
	}
	if err := check(ctx, hc2); err != nil || hits2.Load() != 3 {
		t.Fatalf("waited call: %v, hits %d", err, hits2.Load())
	}
}

// TestClientLimiter: a client's own limit per target and method.
func TestClientLimiter(t *testing.T) {
	addr, hits := server(t, global(t, fixedwindow.Config{Limit: 100, Window: time.Hour}, nil), grpclimit.ServerOptions{})
	perKey, err := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			return memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer perKey.Close()
	var keys []string
	c := &grpclimit.Client{Limiter: perKey, FailFast: true, Key: func(target, method string) string {
		keys = append(keys, target+method)
		return target + method
	}}
	hc := dial(t, addr, c)
	ctx := context.Background()
	if err := check(ctx, hc); err != nil {
		t.Fatal(err)
	}
	if err := watch(ctx, hc); err != nil {
		t.Fatalf("another method: %v", err)
	}
	var rl *grpclimit.RateLimitedError
	if err := check(ctx, hc); !errors.As(err, &rl) || hits.Load() != 2 {
		t.Fatalf("second Check: %v, hits %d", err, hits.Load())
	}
	if keys[0] != addr+"/grpc.health.v1.Health/Check" {
		t.Fatalf("key %q", keys[0])
	}
}

func TestKeys(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	in := func(remote string, md metadata.MD) context.Context {
		addr, _ := net.ResolveTCPAddr("tcp", remote)
		return metadata.NewIncomingContext(peer.NewContext(context.Background(), &peer.Peer{Addr: addr}), md)
	}
	for _, c := range []struct {
		name string
		key  grpclimit.KeyFunc
		ctx  context.Context
		want string
	}{
		{"peer", grpclimit.PeerIP(), in("203.0.113.9:5", nil), "203.0.113.9"},
		{"forged header", grpclimit.PeerIP(), in("10.1.1.1:5", metadata.Pairs("x-forwarded-for", "1.2.3.4")), "10.1.1.1"},
		{"untrusted peer", grpclimit.PeerIP(proxies...), in("203.0.113.9:5", metadata.Pairs("x-forwarded-for", "1.2.3.4")), "203.0.113.9"},
		{"trusted proxies", grpclimit.PeerIP(proxies...), in("10.1.1.1:5", metadata.Pairs("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.2.2.2")), "198.51.100.7"},
		{"metadata", grpclimit.Metadata("X-Api-Key"), in("10.1.1.1:5", metadata.Pairs("x-api-key", "k1")), "k1"},
		{"no metadata", grpclimit.Metadata("x-api-key"), in("10.1.1.1:5", nil), ""},
		{"method", grpclimit.Method(), in("10.1.1.1:5", nil), "/pkg.S/M"},
	} {
		if got := c.key(c.ctx, "/pkg.S/M"); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestInvalid(t *testing.T) {
	var nilPartitioned *partitioned.Limiter
	ok := global(t, fixedwindow.Config{Limit: 1, Window: time.Hour}, nil)
	for _, c := range []struct {
		name string
		l    ratelimit.Keyed
		o    grpclimit.ServerOptions
	}{
		{"nil", nil, grpclimit.ServerOptions{}},
		{"nil *partitioned.Limiter", nilPartitioned, grpclimit.ServerOptions{}},
		{"nil Func", partitioned.Func(nil), grpclimit.ServerOptions{}},
		{"negative MaxWait", ok, grpclimit.ServerOptions{MaxWait: -1}},
	} {
		if i, err := grpclimit.UnaryServerInterceptor(c.l, c.o); !errors.Is(err, ratelimit.ErrInvalidConfig) || i != nil {
			t.Errorf("unary, %s: %v", c.name, err)
		}
		if i, err := grpclimit.StreamServerInterceptor(c.l, c.o); !errors.Is(err, ratelimit.ErrInvalidConfig) || i != nil {
			t.Errorf("stream, %s: %v", c.name, err)
		}
	}
}

// A pause learnt from one refusal is cut to the Client's MaxPause.
func TestClientMaxPause(t *testing.T) {
	clock := ratelimittest.NewClockAt(time.Unix(3600*1000, 0))
	perMethod, err := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			return memory.New(fixedwindow.Config{Limit: 1, Window: time.Hour}, memory.WithClock(clock))
		},
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer perMethod.Close()
	addr, _ := server(t, perMethod, grpclimit.ServerOptions{Key: grpclimit.Method()})
	hc := dial(t, addr, &grpclimit.Client{FailFast: true, Clock: clock, MaxPause: 10 * time.Minute})
	ctx := context.Background()
	check(ctx, hc)
	if err := check(ctx, hc); status.Code(err) != codes.ResourceExhausted || errors.Is(err, grpclimit.ErrRateLimited) {
		t.Fatalf("the server's refusal: %v", err)
	}
	var rl *grpclimit.RateLimitedError
	if err := check(ctx, hc); !errors.As(err, &rl) {
		t.Fatalf("after the refusal: %v, want a local refusal", err)
	}
	if d, ok := rl.RetryAfter(); !ok || d != 10*time.Minute {
		t.Fatalf("local RetryAfter %v %v, want the MaxPause, 10m", d, ok)
	}
}

// With MaxWait, a call that waited it out for a concurrency permit, which
// nobody can say when comes back, is refused for the deadline (without
// RetryInfo), as a call whose wait is known to be too long is.
func TestServerMaxWaitOnConcurrency(t *testing.T) {
	addr, _ := server(t, global(t, concurrency.Config{Limit: 1}, nil), grpclimit.ServerOptions{MaxWait: 20 * time.Millisecond})
	hc := dial(t, addr, nil)
	defer holdStream(t, hc)()
	err := check(context.Background(), hc)
	st, _ := status.FromError(err)
	if _, ok := retryInfo(err); st.Code() != codes.ResourceExhausted || ok || st.Message() != "rate limit exceeded: "+ratelimit.ReasonDeadline.String() {
		t.Fatalf("call waiting MaxWait on a held permit: %v; want ResourceExhausted for the deadline, without RetryInfo", err)
	}
}
