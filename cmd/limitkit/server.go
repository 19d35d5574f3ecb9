package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/cmd/limitkit/envoy"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/policy"
	"github.com/limitkit/ratelimit/tokenbucket"
)

//go:embed web
var webFS embed.FS

// maxBodyBytes bounds every request body (the admin API's own bound, which
// is the same, answers 413 with its JSON error).
const maxBodyBytes = policy.DefaultMaxBodyBytes

// demoApp is the application the demo page calls stored policies as: only
// policies whose Apps allow it can be tried on the demo page.
const demoApp = "demo"

// options configures newServer.
type options struct {
	Token  string                  // the admin API's writer token; required
	Redis  goredis.UniversalClient // nil: the memory backend
	Store  policy.Store            // nil: sample policies, in memory or in Redis
	Logger *slog.Logger            // nil: discard
	Envoy  envoyOptions            // Envoy's rate limit service (envoy.go)
}

// server is the limitkit server's handler: the demo page and its API,
// the management page, the admin API under /api/, /healthz, and /metrics
// (the decisions of the stored policies, by policy, result and reason).
type server struct {
	reg     *policy.Registry
	metrics *metrics
	demo    *demo
	handler http.Handler
	log     *slog.Logger
	redis   bool

	envoy    *envoy.Service // nil without an Envoy configuration
	envoySrc *envoy.Source

	closeOnce sync.Once
	closeErr  error
}

// samplePolicies are the policies of a new store: "demo", which the demo
// page can try, and "api", which only the management page shows.
func samplePolicies() []policy.Policy {
	return []policy.Policy{
		{
			Name:   "demo",
			Config: fixedwindow.Config{Limit: 10, Window: time.Minute},
			Key:    "user",
			Apps:   []string{demoApp, "web"},
		},
		{
			Name:   "api",
			Config: tokenbucket.Config{Rate: 50, Burst: 100},
			Key:    "user",
			Apps:   []string{"web", "mobile"},
		},
	}
}

func newServer(ctx context.Context, opts options) (*server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	store := opts.Store
	if store == nil {
		if opts.Redis != nil {
			rs, err := policy.NewRedisStore(opts.Redis, policy.RedisOptions{
				OnError: func(err error) { opts.Logger.Warn("policy store subscription", "err", err) },
			})
			if err != nil {
				return nil, err
			}
			store = rs
		} else {
			store = policy.NewMemoryStore()
		}
		// A store that already holds them (a fleet's Redis) keeps its own.
		for _, p := range samplePolicies() {
			if _, err := store.Create(ctx, p, "limitkit"); err != nil && !errors.Is(err, policy.ErrExists) {
				return nil, fmt.Errorf("creating the sample policy %q: %w", p.Name, err)
			}
		}
	}
	backend, backendName := policy.Memory(), "memory"
	if opts.Redis != nil {
		backend, backendName = policy.Redis(opts.Redis), "redis"
	}
	m, err := newMetrics(backendName)
	if err != nil {
		return nil, err
	}
	reg, err := policy.NewRegistry(ctx, store, policy.Options{
		Backend: m.wrap(backend),
		OnError: func(err error) { opts.Logger.Warn("applying the policies", "err", err) },
	})
	if err != nil {
		m.close()
		return nil, err
	}
	admin, err := policy.NewAdmin(reg, policy.AdminOptions{Token: opts.Token, MaxBodyBytes: maxBodyBytes})
	if err != nil {
		reg.Close()
		m.close()
		return nil, err
	}
	s := &server{reg: reg, metrics: m, log: opts.Logger, redis: opts.Redis != nil}
	s.demo = newDemo(reg, opts.Redis)

	static, _ := fs.Sub(webFS, "web")
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", serveFile(static, "index.html"))
	mux.Handle("GET /admin", serveFile(static, "admin.html"))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /algorithms.js", serveAlgorithms)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /metrics", m.handler)
	mux.Handle("/api/", http.StripPrefix("/api", admin))
	mux.HandleFunc("POST /demo/sessions", s.demo.createSession)
	mux.HandleFunc("GET /demo/policies", s.demo.policies)
	mux.HandleFunc("POST /demo/run", s.demo.run)
	// Another method on an endpoint is a 405 (with Allow), a path under
	// /demo/ that is none a 404, in JSON as the errors of the demo's API
	// and the admin API (the mux's own are plain text).
	for path, allow := range map[string]string{
		"/healthz": "GET", "/metrics": "GET", "/demo/sessions": "POST", "/demo/policies": "GET", "/demo/run": "POST",
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			fail(w, http.StatusMethodNotAllowed, "", "", "method %s not allowed here (allowed: %s)", r.Method, allow)
		})
	}
	mux.HandleFunc("/demo/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "", "", "no such endpoint")
	})
	if err := s.setupEnvoy(ctx, opts, m.wrap(backend), mux); err != nil {
		s.Close()
		return nil, fmt.Errorf("the Envoy service: %w", err)
	}
	s.handler = s.logRequests(secure(mux))
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *server) backendName() string {
	if s.redis {
		return "redis"
	}
	return "memory"
}

// stopStreams tells every demo run to end its stream now (http.Server's
// Shutdown waits for the handlers otherwise).
func (s *server) stopStreams() { s.demo.stop() }

// Close stops the demo runs, closes the demo's limiters and the registry
// (which closes the policies' limiters). Safe to call twice.
func (s *server) Close() error {
	s.closeOnce.Do(func() {
		s.demo.close()
		var envoyErr error
		if s.envoy != nil {
			envoyErr = s.envoy.Close()
		}
		s.closeErr = errors.Join(envoyErr, s.reg.Close(), s.metrics.close())
	})
	return s.closeErr
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "backend": s.backendName(), "policies": len(s.reg.Policies())})
}

// serveFile serves one embedded page.
func serveFile(fsys fs.FS, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, fsys, name)
	})
}

// secure bounds request bodies and sets the headers that keep the pages to
// their own embedded scripts and styles.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// logRequests logs each request once it is served: method, path, status,
// bytes, duration. Never a header (the admin token is in one) nor a query.
func (s *server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.status), slog.Int64("bytes", rec.bytes),
			slog.Duration("duration", time.Since(start)), slog.String("remote", r.RemoteAddr))
	})
}

// recorder notes a response's status and size; Unwrap lets
// http.ResponseController reach the connection (the demo's stream flushes).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// apiError is the JSON of an error, as the admin API writes it.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Value string `json:"value,omitempty"`
}

func fail(w http.ResponseWriter, status int, field, value, format string, args ...any) {
	writeJSON(w, status, apiError{Error: fmt.Sprintf(format, args...), Field: field, Value: value})
}
