package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/limitkit/ratelimit/cmd/limitkit/envoy"
	"github.com/limitkit/ratelimit/policy"
)

// envoyOptions configures the Envoy rate limit service of the server.
type envoyOptions struct {
	// Config is envoyproxy/ratelimit's configuration: a YAML file or a
	// directory of them, reloaded when it changes. Empty: no service.
	Config string
	// StopCountingOverLimit is envoy.Options.StopCountingOverLimit.
	StopCountingOverLimit bool
	// LocalCacheSize is envoy.Options.LocalCacheSize.
	LocalCacheSize int
}

// setupEnvoy makes the Envoy service of opts (none when opts.Envoy.Config
// is empty) on backend, its policies' metrics recorded, and serves its
// configuration to the management page on GET /envoy/config.
func (s *server) setupEnvoy(ctx context.Context, opts options, backend policy.Backend, mux *http.ServeMux) error {
	token := sha256.Sum256([]byte(opts.Token))
	mux.HandleFunc("GET /envoy/config", func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if sum := sha256.Sum256([]byte(got)); !ok || subtle.ConstantTimeCompare(sum[:], token[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="limitkit"`)
			fail(w, http.StatusUnauthorized, "", "", "a valid admin token is required")
			return
		}
		writeJSON(w, http.StatusOK, s.envoyView())
	})
	if opts.Envoy.Config == "" {
		return nil
	}
	src, err := envoy.NewSource(opts.Envoy.Config, envoy.SourceOptions{
		OnError: func(err error) {
			opts.Logger.Error("reading the Envoy configuration (the last valid one is served)", "err", err)
		},
	})
	if err != nil {
		return err
	}
	svc, err := envoy.NewService(ctx, envoy.Options{
		Source:                src,
		Backend:               backend,
		Policies:              s.reg,
		StopCountingOverLimit: opts.Envoy.StopCountingOverLimit,
		LocalCacheSize:        opts.Envoy.LocalCacheSize,
		OnError:               func(err error) { opts.Logger.Warn("Envoy rate limit service", "err", err) }, // rules that do not apply, hits not given back
	})
	if err != nil {
		return err
	}
	s.envoy, s.envoySrc = svc, src
	return nil
}

// envoyDescriptor is a rule of the Envoy configuration on the management page.
type envoyDescriptor struct {
	Path        string   `json:"path"`
	Limit       string   `json:"limit"`
	Name        string   `json:"name,omitempty"`
	Replaces    []string `json:"replaces,omitempty"`
	ShadowMode  bool     `json:"shadow_mode,omitempty"`
	FailureMode string   `json:"failure_mode"`
	Policy      string   `json:"policy,omitempty"` // the policy that decides it
}

type envoyDomain struct {
	Domain      string            `json:"domain"`
	Descriptors []envoyDescriptor `json:"descriptors"`
}

// envoyView is the Envoy configuration as the management page shows it.
func (s *server) envoyView() map[string]any {
	if s.envoySrc == nil {
		return map[string]any{"enabled": false}
	}
	v := map[string]any{"enabled": true, "path": s.envoySrc.Path(), "domains": []envoyDomain{}}
	if err := s.envoySrc.Err(); err != nil {
		v["error"] = err.Error()
	}
	cfg := s.envoySrc.Config()
	if cfg == nil {
		return v
	}
	byDomain := map[string]*envoyDomain{}
	out := []envoyDomain{} // an empty list, not null, for the page
	for _, d := range cfg.Domains() {
		out = append(out, envoyDomain{Domain: d, Descriptors: []envoyDescriptor{}})
	}
	for i := range out {
		byDomain[out[i].Domain] = &out[i]
	}
	for _, r := range cfg.Rules() {
		d := envoyDescriptor{Path: r.Path, Name: r.Name, Replaces: r.Replaces, ShadowMode: r.ShadowMode,
			FailureMode: r.FailureMode.String(), Policy: r.PolicyName}
		switch {
		case r.Policy != "":
			d.Limit, d.Policy = "policy "+r.Policy, r.Policy
		case r.Unlimited:
			d.Limit = "unlimited"
		default:
			d.Limit = strconv.FormatUint(uint64(r.RequestsPerUnit), 10) + " per " + strings.ToLower(r.Unit.String())
		}
		byDomain[r.Domain].Descriptors = append(byDomain[r.Domain].Descriptors, d)
	}
	v["domains"] = out
	return v
}

// serveGRPC serves the Envoy service on ln until stop is called, which
// lets the calls in flight finish for up to timeout.
func serveGRPC(ln net.Listener, svc *envoy.Service, logger *slog.Logger) func(timeout time.Duration) {
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, svc)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	var once sync.Once
	return func(timeout time.Duration) { once.Do(func() { stopGRPC(gs, served, timeout, logger) }) }
}

// stopGRPC stops gs gracefully, for up to timeout, then at once.
func stopGRPC(gs *grpc.Server, served chan error, timeout time.Duration, logger *slog.Logger) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		gs.Stop()
		<-done
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		logger.Warn("the gRPC server", "err", err)
	}
}
