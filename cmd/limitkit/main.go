// Command limitkit serves limitkit's demo page, where a person fires
// requests at real limiters and watches them allowed or refused live, and its
// management page, where an administrator edits the rate-limit policies
// through the admin API (policy.NewAdmin, under /api/).
//
// It runs on the memory backend with sample policies by default:
//
//	cd cmd/limitkit && go run .
//
// and on Redis, shared by a fleet, with -redis host:port (several
// comma-separated addresses for a Cluster, or -redis-master for Sentinel).
// Every asset is embedded: nothing is fetched at run time.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/policy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "limitkit:", err)
		os.Exit(1)
	}
}

// errUsage is a command line the flags refused (already reported).
var errUsage = errors.New("usage")

// shutdownTimeout bounds how long requests in flight may take to finish
// after SIGTERM.
const shutdownTimeout = 15 * time.Second

// startupTimeout bounds reading the policies at start-up.
const startupTimeout = 30 * time.Second

// run parses args, serves until ctx is done, then shuts down gracefully:
// requests in flight finish (demo runs are told to stop), then the
// limiters and the registry are closed. ready, if set, is called with the
// server's base URL once it accepts connections.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(baseURL string)) error {
	fs := flag.NewFlagSet("limitkit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	redisAddrs := fs.String("redis", "", "Redis address(es), comma-separated: one for a single node, several for a Cluster (or Sentinels with -redis-master); empty: the memory backend")
	redisMaster := fs.String("redis-master", "", "the Sentinel master name, when -redis lists Sentinels")
	token := fs.String("token", "", "the admin token (default $LIMITKIT_TOKEN; when both are empty a random one is made and printed on stderr)")
	grpcAddr := fs.String("grpc", "", "address to serve Envoy's rate limit service on (gRPC, host:port; port 0 picks a free one); needs -envoy-config")
	envoyConfig := fs.String("envoy-config", "", "envoyproxy/ratelimit's YAML configuration: a file, or a directory of them, reloaded when it changes")
	stopCounting := fs.Bool("envoy-stop-counting-over-limit", false, "when a descriptor of an Envoy call is over its limit, give back the hits of the others (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)")
	localCache := fs.Int("envoy-local-cache", 0, "how many Envoy descriptors past their limit to remember, answered OVER_LIMIT without asking the backend until their window ends (envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES, in entries); 0: none")
	policies := fs.String("policies", "", "a JSON policy file, served read-only and reloaded when it changes (default: a store with sample policies: in memory, or in Redis with -redis)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: limitkit [flags]\n\nServes the limitkit demo page (/) and management page (/admin).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "limitkit: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	if *grpcAddr != "" && *envoyConfig == "" {
		fmt.Fprintln(stderr, "limitkit: -grpc needs -envoy-config")
		return errUsage
	}
	if *localCache < 0 {
		fmt.Fprintf(stderr, "limitkit: -envoy-local-cache %d is negative\n", *localCache)
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	tok := *token
	if tok == "" {
		tok = os.Getenv("LIMITKIT_TOKEN")
	}
	if tok == "" {
		b := make([]byte, 24)
		rand.Read(b)
		tok = hex.EncodeToString(b)
		fmt.Fprintf(stderr, "limitkit: admin token (set -token or LIMITKIT_TOKEN to choose one): %s\n", tok)
	}

	opts := options{Token: tok, Logger: logger, Envoy: envoyOptions{Config: *envoyConfig, StopCountingOverLimit: *stopCounting, LocalCacheSize: *localCache}}
	if *redisAddrs != "" {
		client := goredis.NewUniversalClient(&goredis.UniversalOptions{
			Addrs:                 strings.Split(*redisAddrs, ","),
			MasterName:            *redisMaster,
			Password:              os.Getenv("LIMITKIT_REDIS_PASSWORD"),
			ContextTimeoutEnabled: true,
		})
		defer client.Close()
		opts.Redis = client
	}
	if *policies != "" {
		fstore, err := policy.NewFileStore(*policies, policy.FileOptions{
			OnError: func(err error) { logger.Error("reading the policy file", "path", *policies, "err", err) },
		})
		if err != nil {
			return err
		}
		opts.Store = fstore
	}

	// Start-up reads (and on a new store writes) the policies: bounded, so
	// that an unreachable Redis is an error, not a hang.
	sctx, scancel := context.WithTimeout(ctx, startupTimeout)
	srv, err := newServer(sctx, opts)
	scancel()
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "limitkit: serving the demo at %s/ and the management page at %s/admin (%s backend)\n", base, base, srv.backendName())

	stopGRPC := func(time.Duration) {}
	if *grpcAddr != "" {
		gln, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			ln.Close()
			return err
		}
		fmt.Fprintf(stdout, "limitkit: serving Envoy's rate limit service (gRPC) at %s\n", gln.Addr())
		stopGRPC = serveGRPC(gln, srv.envoy, logger)
		defer stopGRPC(0)
	}

	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(srv.stopStreams)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if ready != nil {
		ready(base)
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down: letting requests in flight finish")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = hs.Shutdown(sctx)
	<-served
	stopGRPC(shutdownTimeout)
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	logger.Info("stopped")
	return err
}
