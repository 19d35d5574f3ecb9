package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/base"
	"github.com/limitkit/ratelimit/internal/check"
)

// ErrRateLimited is matched (errors.Is) by the errors the client
// interceptors return for calls they do not send. Those errors also carry
// a gRPC status (status.FromError, status.Code): codes.ResourceExhausted
// with a RetryInfo detail when the wait is known, as the server's refusals.
var ErrRateLimited = errors.New("grpclimit: rate limited")

// RateLimitedError says why a call was not sent and when to retry.
type RateLimitedError struct {
	Key        string // the call's key: its target and method by default
	Reason     ratelimit.Reason
	retryAfter time.Duration // negative: unknown
}

// RetryAfter is how long until the call could be sent; ok is false when
// that is not known (a concurrency limit).
func (e *RateLimitedError) RetryAfter() (d time.Duration, ok bool) {
	return max(e.retryAfter, 0), e.retryAfter >= 0
}

func (e *RateLimitedError) Error() string {
	if d, ok := e.RetryAfter(); ok {
		return fmt.Sprintf("grpclimit: %s: %v, retry after %v", e.Key, e.Reason, d)
	}
	return fmt.Sprintf("grpclimit: %s: %v", e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrRateLimited) hold.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// GRPCStatus is the error's status: ResourceExhausted with a RetryInfo.
func (e *RateLimitedError) GRPCStatus() *status.Status {
	st, _ := status.FromError(refusal("grpclimit: rate limited by the client: "+e.Reason.String(), e.retryAfter))
	return st
}

// Client throttles outbound calls per target and method, and learns from
// the server: a call that fails with codes.ResourceExhausted and a
// google.rpc.RetryInfo detail or "retry-after" metadata (in seconds)
// pauses its key for that long (the longer of the two when both are
// given; at most MaxPause), so the next calls wait here (or, with
// FailFast, are refused here) instead of reaching the server. A call not
// sent returns a *RateLimitedError.
//
// Its interceptors are UnaryClientInterceptor and StreamClientInterceptor,
// for grpc.WithChainUnaryInterceptor and grpc.WithChainStreamInterceptor.
// The zero Client only learns; set Limiter to also keep a limit of one's
// own. A concurrency limiter's permit is held until the unary call returns,
// or until the stream ends (its RecvMsg returns an error or io.EOF, or its
// context is done).
type Client struct {
	// Limiter decides per key; nil keeps no limit of one's own.
	Limiter ratelimit.Keyed
	// Key maps a call to its partition; target + method by default
	// ("dns:///api.example:443/pkg.Service/Method").
	Key func(target, fullMethod string) string
	// FailFast refuses at once instead of waiting (within the call's context).
	FailFast bool
	// Clock reads the time for pauses; the system clock when nil.
	Clock ratelimit.Clock
	// MaxPause bounds the pause one refusal can set (a longer one is cut
	// to it): a wrong or hostile server cannot stall the calls that have
	// no deadline for longer. Zero means 366 days (a yearly quota's
	// longest wait).
	MaxPause time.Duration

	pauses base.Pauses
}

func (c *Client) now() time.Time {
	if c.Clock != nil {
		return c.Clock.Now()
	}
	return time.Now()
}

func (c *Client) key(target, method string) string {
	if c.Key != nil {
		return c.Key(target, method)
	}
	return target + method
}

// admit waits out a pause and takes a permit for a call of key; the
// returned lease is granted, or err says why the call is not sent.
func (c *Client) admit(ctx context.Context, key string) (ratelimit.Lease, error) {
	wait, refused, err := c.pauses.Wait(ctx, c.Clock, key, c.FailFast)
	if refused {
		return ratelimit.Lease{}, &RateLimitedError{Key: key, Reason: ratelimit.ReasonLimit, retryAfter: wait}
	}
	if err != nil {
		return ratelimit.Lease{}, status.FromContextError(err).Err()
	}
	if check.IsNil(c.Limiter) {
		return ratelimit.Lease{}, nil
	}
	var lease ratelimit.Lease
	if c.FailFast {
		lease, err = c.Limiter.Acquire(ctx, key, 1)
	} else {
		lease, err = c.Limiter.Wait(ctx, key, 1)
	}
	if err != nil {
		if ctx.Err() != nil {
			return lease, status.FromContextError(ctx.Err()).Err()
		}
		return lease, err
	}
	if !lease.Acquired() {
		return lease, &RateLimitedError{Key: key, Reason: lease.Reason(), retryAfter: retryOf(lease)}
	}
	return lease, nil
}

// learn pauses key when err is a ResourceExhausted refusal that says for
// how long: the RetryInfo's delay, else md's "retry-after" seconds; the
// longer of the two when both are given.
func (c *Client) learn(key string, err error, md metadata.MD) {
	if err == nil || errors.Is(err, ErrRateLimited) {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return
	}
	var d time.Duration
	for _, detail := range st.Details() {
		if ri, ok := detail.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().IsValid() {
			d = max(d, ri.GetRetryDelay().AsDuration())
		}
	}
	for _, v := range md.Get("retry-after") {
		if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s > 0 {
			d = max(d, time.Duration(min(s, int64(maxPause/time.Second)))*time.Second)
		}
	}
	if d = min(d, maxPause, base.MaxPause(c.MaxPause)); d > 0 {
		now := c.now()
		c.pauses.Pause(key, now.Add(d), now)
	}
}

// maxPause bounds a learnt pause: the longest window a limitkit limiter
// accepts.
const maxPause = check.MaxDuration

// UnaryClientInterceptor throttles unary calls, and learns from their
// refusals.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		key := c.key(cc.Target(), method)
		lease, err := c.admit(ctx, key)
		if err != nil {
			return err
		}
		defer lease.Release()
		var header, trailer metadata.MD
		err = invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
		c.learn(key, err, metadata.Join(header, trailer))
		return err
	}
}

// StreamClientInterceptor throttles streams, one permit per stream, and
// learns from their refusals, which arrive with the stream's first
// message.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		key := c.key(cc.Target(), method)
		lease, err := c.admit(ctx, key)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			lease.Release()
			c.learn(key, err, nil)
			return nil, err
		}
		s := &clientStream{ClientStream: cs, c: c, key: key, lease: lease}
		s.stop = context.AfterFunc(cs.Context(), s.release)
		return s, nil
	}
}

// clientStream releases its lease when the stream ends, and learns from
// the error it ends with.
type clientStream struct {
	grpc.ClientStream
	c     *Client
	key   string
	lease ratelimit.Lease
	once  sync.Once
	stop  func() bool
}

func (s *clientStream) release() { s.once.Do(s.lease.Release) }

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		if err != io.EOF {
			md, _ := s.ClientStream.Header()
			s.c.learn(s.key, err, metadata.Join(md, s.ClientStream.Trailer()))
		}
		s.stop()
		s.release()
	}
	return err
}
