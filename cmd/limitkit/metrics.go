package main

import (
	"context"
	"errors"
	"net/http"
	"sync"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/limitkit/ratelimit"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/policy"
)

// metrics records the decisions of every stored policy's limiters with the
// otel module, and serves them on /metrics in the Prometheus text format.
type metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	backend  string // "memory" or "redis": the ratelimit.backend attribute

	mu        sync.Mutex
	recorders map[[2]string]*limitotel.Recorder // by policy name and algorithm
}

func newMetrics(backend string) (*metrics, error) {
	reader, handler, err := limitotel.NewPrometheus()
	if err != nil {
		return nil, err
	}
	return &metrics{
		provider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		handler:   handler,
		backend:   backend,
		recorders: map[[2]string]*limitotel.Recorder{},
	}, nil
}

// recorder returns the Recorder of p's name and algorithm, made on first
// use and kept until close: a policy whose limiters are replaced (a change
// of algorithm, a deletion and a new creation) goes on counting where it
// was, as a Prometheus counter must.
func (m *metrics) recorder(p policy.Policy) (*limitotel.Recorder, error) {
	k := [2]string{p.Name, p.Algorithm()}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.recorders[k]; r != nil {
		return r, nil
	}
	r, err := limitotel.NewRecorder(limitotel.WithMeterProvider(m.provider),
		limitotel.WithPolicy(p.Name), limitotel.WithConfig(p.Config), limitotel.WithBackend(m.backend))
	if err != nil {
		return nil, err
	}
	m.recorders[k] = r
	return r, nil
}

// wrap returns b with every limiter it makes recording on its policy's
// Recorder.
func (m *metrics) wrap(b policy.Backend) policy.Backend {
	return func(p policy.Policy) (policy.Factory, error) {
		f, err := b(p)
		if err != nil {
			return nil, err
		}
		r, err := m.recorder(p)
		if err != nil {
			return nil, err
		}
		return &recordedFactory{f: f, r: r}, nil
	}
}

func (m *metrics) close() error {
	m.mu.Lock()
	var errs []error
	for _, r := range m.recorders {
		errs = append(errs, r.Close())
	}
	m.recorders = map[[2]string]*limitotel.Recorder{}
	m.mu.Unlock()
	return errors.Join(append(errs, m.provider.Shutdown(context.Background()))...)
}

// recordedFactory makes its factory's limiters, wrapped to record on r.
// It passes a change of configuration on to the factory (which applies it
// to the limiters it made: memory's and redis's do), so that the registry
// still changes a policy's limit in place, state kept.
type recordedFactory struct {
	f policy.Factory
	r *limitotel.Recorder
}

func (rf *recordedFactory) ForKey(key string) (ratelimit.Limiter, error) {
	l, err := rf.f.ForKey(key)
	if err != nil {
		return nil, err
	}
	return recorded{rf.r.Wrap(l)}, nil
}

func (rf *recordedFactory) Reconfigure(cfg ratelimit.Config) error {
	r, ok := rf.f.(ratelimit.Reconfigurer)
	if !ok {
		return errors.ErrUnsupported // the registry then replaces the limiters
	}
	return r.Reconfigure(cfg)
}

// recorded is a limiter wrapped by the otel module, which keeps Idler,
// Refunder, Stats and Close; it adds the Resetter and Reconfigurer of the
// limiter it wraps, which the registry relies on (the admin API's reset,
// a change of limit in place).
type recorded struct{ *limitotel.Limiter }

func (r recorded) Reset(ctx context.Context) error {
	if rs, ok := r.Unwrap().(ratelimit.Resetter); ok {
		return rs.Reset(ctx)
	}
	return errors.ErrUnsupported
}

func (r recorded) Reconfigure(cfg ratelimit.Config) error {
	if rc, ok := r.Unwrap().(ratelimit.Reconfigurer); ok {
		return rc.Reconfigure(cfg)
	}
	return errors.ErrUnsupported
}
