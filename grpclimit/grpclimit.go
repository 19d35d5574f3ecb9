// Package grpclimit applies limitkit limiters to gRPC: server interceptors
// that refuse calls over a limit, and client interceptors that keep calls
// under an upstream's limits and learn from its refusals, as httplimit's
// Middleware and Transport do for HTTP.
//
// A refusal is a status with codes.ResourceExhausted carrying a
// google.rpc.RetryInfo detail (the time until the call could be granted)
// and, in the response header metadata, "retry-after" in whole seconds,
// rounded up. A client interceptor that receives such a refusal pauses
// that target and method for the longer of the two (either when only one
// is given), so the next calls wait locally instead of reaching the
// server.
//
// Limiters are ratelimit.Keyed: a *partitioned.Limiter (one limit
// per peer, per caller or per method), partitioned.Global of one limiter,
// or a partitioned.Func.
//
// This is its own module, so that limitkit's core does not depend on gRPC.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/internal/check"
)

// KeyFunc returns the partition key of a call: its incoming context (with
// its peer and metadata) and its full method name ("/pkg.Service/Method").
type KeyFunc func(ctx context.Context, fullMethod string) string

// PeerIP keys calls by the client's IP address: the peer's, unless the
// peer is one of the trusted proxies, in which case the "x-forwarded-for"
// metadata is read from the right, skipping trusted proxies, and the first
// address not trusted is the client; the rules of httplimit.ClientIP. With
// no trusted proxies the metadata is ignored: anyone can forge it.
func PeerIP(trusted ...netip.Prefix) KeyFunc {
	clientIP := httplimit.ClientIP(trusted...)
	return func(ctx context.Context, _ string) string {
		r := &http.Request{Header: http.Header{}}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			r.RemoteAddr = p.Addr.String()
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			r.Header["X-Forwarded-For"] = md.Get("x-forwarded-for")
		}
		return clientIP(r)
	}
}

// Metadata keys calls by the first value of the incoming metadata key
// (an API key, a tenant), "" when absent.
func Metadata(key string) KeyFunc {
	key = strings.ToLower(key)
	return func(ctx context.Context, _ string) string {
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// Method keys calls by their full method name: one limit per method.
func Method() KeyFunc {
	return func(_ context.Context, fullMethod string) string { return fullMethod }
}

// ServerOptions configures the server interceptors. The zero value is
// usable.
type ServerOptions struct {
	// Key maps a call to its partition; PeerIP() by default.
	Key KeyFunc
	// MaxWait > 0 makes calls wait in the limiter's queue for up to MaxWait
	// (and the call's own context) instead of being refused at once; a call
	// that waited it out is refused for the deadline. It must not be
	// negative.
	MaxWait time.Duration
}

// server is a validated limiter and ServerOptions.
type server struct {
	l ratelimit.Keyed
	o ServerOptions
}

func newServer(l ratelimit.Keyed, o ServerOptions) (*server, error) {
	if check.IsNil(l) {
		return nil, fmt.Errorf("%w: grpclimit: the server interceptor needs a limiter, got nil", ratelimit.ErrInvalidConfig)
	}
	if o.MaxWait < 0 {
		return nil, fmt.Errorf("%w: grpclimit: ServerOptions.MaxWait must not be negative, got %v", ratelimit.ErrInvalidConfig, o.MaxWait)
	}
	if o.Key == nil {
		o.Key = PeerIP()
	}
	return &server{l: l, o: o}, nil
}

// acquire decides a call; the lease is granted, or err is the call's
// status error.
func (s *server) acquire(ctx context.Context, method string) (ratelimit.Lease, error) {
	key := s.o.Key(ctx, method)
	var lease ratelimit.Lease
	var err error
	if s.o.MaxWait > 0 {
		wctx, cancel := context.WithTimeout(ctx, s.o.MaxWait)
		lease, err = s.l.Wait(wctx, key, 1)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// Waited MaxWait for permits whose return no one could tell (a
			// concurrency limit's): a refusal for the deadline.
			return lease, refusal(fmt.Sprintf("rate limit exceeded: %v", ratelimit.ReasonDeadline), -1)
		}
	} else {
		lease, err = s.l.Acquire(ctx, key, 1)
	}
	if err != nil {
		if ctx.Err() != nil {
			return lease, status.FromContextError(ctx.Err()).Err()
		}
		return lease, status.Error(codes.Unavailable, "grpclimit: rate limiter unavailable")
	}
	if lease.Acquired() {
		return lease, nil
	}
	d, ok := lease.RetryAfter()
	if !ok {
		d = -1
	}
	return lease, refusal(fmt.Sprintf("rate limit exceeded: %v", lease.Reason()), d)
}

// refusal is the ResourceExhausted status of a refused call, with a
// RetryInfo of d when d >= 0.
func refusal(msg string, d time.Duration) error {
	st := status.New(codes.ResourceExhausted, msg)
	if d >= 0 {
		if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
			st = with
		}
	}
	return st.Err()
}

// retryAfterMD is the "retry-after" header of a refusal of d.
func retryAfterMD(d time.Duration) metadata.MD {
	return metadata.Pairs("retry-after", strconv.FormatInt(check.CeilSeconds(d), 10))
}

// retryOf is a refused lease's RetryAfter, negative when unknown.
func retryOf(lease ratelimit.Lease) time.Duration {
	if d, ok := lease.RetryAfter(); ok {
		return d
	}
	return -1
}

// UnaryServerInterceptor limits unary calls per Key with l. A refused call
// gets codes.ResourceExhausted with a RetryInfo detail and "retry-after"
// header metadata; a limiter that cannot decide, codes.Unavailable. A
// concurrency limiter's permit is held until the handler returns.
//
// A nil l (or a nil *partitioned.Limiter in it) or a negative MaxWait is
// an error wrapping ratelimit.ErrInvalidConfig.
func UnaryServerInterceptor(l ratelimit.Keyed, o ServerOptions) (grpc.UnaryServerInterceptor, error) {
	s, err := newServer(l, o)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lease, err := s.acquire(ctx, info.FullMethod)
		if err != nil {
			if d := retryOf(lease); !lease.Acquired() && d >= 0 {
				grpc.SetHeader(ctx, retryAfterMD(d))
			}
			return nil, err
		}
		defer lease.Release()
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor limits streaming calls per Key with l: one
// permit per stream, decided when it opens, with the refusals of
// UnaryServerInterceptor. A concurrency limiter's permit is held until the
// handler returns.
func StreamServerInterceptor(l ratelimit.Keyed, o ServerOptions) (grpc.StreamServerInterceptor, error) {
	s, err := newServer(l, o)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		lease, err := s.acquire(ss.Context(), info.FullMethod)
		if err != nil {
			if d := retryOf(lease); !lease.Acquired() && d >= 0 {
				ss.SetHeader(retryAfterMD(d))
			}
			return err
		}
		defer lease.Release()
		return handler(srv, ss)
	}, nil
}
