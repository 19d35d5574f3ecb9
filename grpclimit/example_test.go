package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/grpclimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
)

// A server limited to 100 calls per minute per client IP, behind proxies
// in 10.0.0.0/8 that set x-forwarded-for.
func ExampleUnaryServerInterceptor() {
	perIP, _ := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			return memory.New(fixedwindow.Config{Limit: 100, Window: time.Minute})
		},
	})
	defer perIP.Close()
	o := grpclimit.ServerOptions{Key: grpclimit.PeerIP(netip.MustParsePrefix("10.0.0.0/8"))}
	unary, err := grpclimit.UnaryServerInterceptor(perIP, o)
	if err != nil {
		panic(err)
	}
	stream, err := grpclimit.StreamServerInterceptor(perIP, o)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	defer srv.Stop()
	fmt.Println("serving")
	// Output: serving
}

// A client that pauses a method after the server refuses it with a
// RetryInfo, and refuses at once while the pause lasts.
func ExampleClient() {
	c := &grpclimit.Client{FailFast: true}
	conn, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if errors.Is(err, grpclimit.ErrRateLimited) {
		fmt.Println("not sent: paused after a refusal")
	}
}
