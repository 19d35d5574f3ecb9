package main

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/limitkit/ratelimit"
	limitotel "github.com/limitkit/ratelimit/otel"
	"github.com/limitkit/ratelimit/policy"
)

// metrics records the decisions of every stored policy's limiters with the
// otel module, and serves them on /metrics in the Prometheus text format.
// Each policy's instruments (by name and algorithm) are on a meter provider
// of their own, so that a policy deleted takes its series with it, the
// histograms' too (a meter provider never forgets a series it recorded).
type metrics struct {
	base     *sdkmetric.MeterProvider // target_info, once
	registry *prometheus.Registry     // base's
	handler  http.Handler
	backend  string // "memory" or "redis": the ratelimit.backend attribute

	mu       sync.Mutex
	policies map[[2]string]*policyMetrics // by policy name and algorithm
}

// policyMetrics is the Recorder of a policy's name and algorithm, and the
// meter provider and registry its series are on.
type policyMetrics struct {
	recorder *limitotel.Recorder
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
	users    int // factories recording on it
}

func newMetrics(backend string) (*metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	m := &metrics{
		base:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		registry: reg,
		backend:  backend,
		policies: map[[2]string]*policyMetrics{},
	}
	m.handler = promhttp.HandlerFor(prometheus.GathererFunc(m.gather), promhttp.HandlerOpts{})
	return m, nil
}

// gather collects the series of every policy in use.
func (m *metrics) gather() ([]*dto.MetricFamily, error) {
	m.mu.Lock()
	gs := prometheus.Gatherers{m.registry}
	for _, pm := range m.policies {
		gs = append(gs, pm.registry)
	}
	m.mu.Unlock()
	return gs.Gather()
}

// recorder returns the Recorder of p's name and algorithm, made on first
// use, and counts one more user of it (see release). A policy whose
// limiters are replaced (a change of key kind) goes on counting where it
// was, as a Prometheus counter must: the registry makes the new factory
// before it closes the old one. A policy deleted (or changed to another
// algorithm) is no longer served: its series go; made again, it counts
// from zero, a reset that Prometheus's rate() reads as one.
func (m *metrics) recorder(p policy.Policy) (*limitotel.Recorder, error) {
	k := [2]string{p.Name, p.Algorithm()}
	m.mu.Lock()
	defer m.mu.Unlock()
	if pm := m.policies[k]; pm != nil {
		pm.users++
		return pm.recorder, nil
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	r, err := limitotel.NewRecorder(limitotel.WithMeterProvider(provider),
		limitotel.WithPolicy(p.Name), limitotel.WithConfig(p.Config), limitotel.WithBackend(m.backend))
	if err != nil {
		provider.Shutdown(context.Background())
		return nil, err
	}
	m.policies[k] = &policyMetrics{recorder: r, provider: provider, registry: reg, users: 1}
	return r, nil
}

// release counts one user less of the Recorder of name and algorithm; the
// last one removes its series.
func (m *metrics) release(k [2]string) error {
	m.mu.Lock()
	pm := m.policies[k]
	if pm == nil {
		m.mu.Unlock()
		return nil
	}
	if pm.users--; pm.users > 0 {
		m.mu.Unlock()
		return nil
	}
	delete(m.policies, k)
	m.mu.Unlock()
	return pm.close()
}

func (pm *policyMetrics) close() error {
	return errors.Join(pm.recorder.Close(), pm.provider.Shutdown(context.Background()))
}

// wrap returns b with every limiter it makes recording on its policy's
// Recorder, until the registry closes the factory.
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
		return &recordedFactory{f: f, r: r, release: func() error { return m.release([2]string{p.Name, p.Algorithm()}) }}, nil
	}
}

func (m *metrics) close() error {
	m.mu.Lock()
	var errs []error
	for _, pm := range m.policies {
		errs = append(errs, pm.close())
	}
	m.policies = map[[2]string]*policyMetrics{}
	m.mu.Unlock()
	return errors.Join(append(errs, m.base.Shutdown(context.Background()))...)
}

// recordedFactory makes its factory's limiters, wrapped to record on r.
// It passes a change of configuration on to the factory (which applies it
// to the limiters it made: memory's and redis's do), so that the registry
// still changes a policy's limit in place, state kept.
type recordedFactory struct {
	f       policy.Factory
	r       *limitotel.Recorder
	release func() error
	once    sync.Once
}

// Close tells the metrics that the registry no longer uses the factory:
// the last of its policy's name and algorithm takes the series with it.
func (rf *recordedFactory) Close() error {
	var err error
	rf.once.Do(func() { err = rf.release() })
	return err
}

func (rf *recordedFactory) ForKey(key string) (ratelimit.Limiter, error) {
	l, err := rf.f.ForKey(key)
	if err != nil {
		return nil, err
	}
	return rf.r.Wrap(l), nil // it unwraps to l: the registry reaches l's Reset and Reconfigure
}

func (rf *recordedFactory) Reconfigure(cfg ratelimit.Config) error {
	r, ok := rf.f.(interface{ Reconfigure(ratelimit.Config) error })
	if !ok {
		return errors.ErrUnsupported // the registry then replaces the limiters
	}
	return r.Reconfigure(cfg)
}
