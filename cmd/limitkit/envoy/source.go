package envoy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/ratelimit/policy"
)

// App is the application the service calls the policies as: a policy of
// the server's store that a descriptor names must allow it (or "*").
const App = "envoy"

// KeyKind is the key kind (policy.Policy.Key) of the policies a Source
// makes: each counts per descriptor.
const KeyKind = "descriptor"

// SourceOptions configures NewSource. The zero value is the defaults.
type SourceOptions struct {
	// Interval is how often Watch reads the files again; zero means one
	// second.
	Interval time.Duration
	// OnError, if set, receives the errors of reading the files (at start
	// too): the Source then keeps the configuration it last read.
	OnError func(error)
}

// Source reads envoyproxy/ratelimit configuration files: one file, or
// every file of a directory (sorted by name, dot-files left out), each a
// domain. It is the read-only policy.Store of the fixed windows their rules
// describe (Create, Update and Delete return policy.ErrReadOnly), so that a
// policy.Registry over it makes their limiters and follows their changes.
//
// As envoyproxy/ratelimit does, a Source whose files do not read or check
// serves no configuration (Config is nil, Err says why) until they do, and
// one that read them once keeps that configuration while they do not.
// Watch reads the files every Interval and compares their SHA-256 with the
// last one read.
type Source struct {
	path string
	opts SourceOptions

	cur atomic.Pointer[Config]
	err atomic.Pointer[error]

	mu   sync.Mutex
	sum  [sha256.Size]byte
	read bool    // sum is of files read (valid or not)
	next *Config // during a change: List serves cur's and next's policies
}

// NewSource reads the configuration at path, a file or a directory. It
// returns an error only when path cannot be read at all; a configuration
// that does not check is reported to OnError and left out (see Source).
func NewSource(path string, opts SourceOptions) (*Source, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("envoy: the configuration path: %w", err)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	s := &Source{path: path, opts: opts}
	if cfg, changed := s.reload(); changed && cfg != nil {
		s.cur.Store(cfg)
	}
	return s, nil
}

// Config returns the configuration served now; nil when none was read.
func (s *Source) Config() *Config { return s.cur.Load() }

// Err returns the error of the last reading of the files, nil when it
// succeeded.
func (s *Source) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Path is the path the Source reads.
func (s *Source) Path() string { return s.path }

// files reads the configuration's files.
func (s *Source) files() ([]File, error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(s.path)
		return []File{{Name: filepath.Base(s.path), Data: data}}, err
	}
	ents, err := os.ReadDir(s.path)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, e := range ents { // sorted by name
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.path, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, File{Name: e.Name(), Data: data})
	}
	return out, nil
}

// reload reads the files; changed is false when they are as last read.
// cfg is nil when they do not read or check (reported).
func (s *Source) reload() (cfg *Config, changed bool) {
	files, err := s.files()
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s:%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if err == nil {
		s.mu.Lock()
		same := s.read && sum == s.sum
		s.sum, s.read = sum, true
		s.mu.Unlock()
		if same {
			return nil, false
		}
		cfg, err = Parse(files)
	}
	if err != nil {
		s.err.Store(&err)
		if s.opts.OnError != nil {
			s.opts.OnError(err)
		}
		return nil, true
	}
	s.err.Store(nil)
	return cfg, true
}

// policies returns the fixed window policies of cfg's rules.
func policies(cfg *Config) []policy.Policy {
	if cfg == nil {
		return nil
	}
	var out []policy.Policy
	for _, r := range cfg.rules {
		if r.PolicyName == "" {
			continue
		}
		out = append(out, policy.Policy{Name: r.PolicyName, Config: counting(r.Config()), Key: KeyKind, Apps: []string{App}})
	}
	return out
}

// List returns the policies of the configuration served, and during a
// change those of the next one too (its own where a name is in both), so
// that a registry has the limiters of both while the change is made.
func (s *Source) List(ctx context.Context) ([]policy.Policy, error) {
	s.mu.Lock()
	next := s.next
	s.mu.Unlock()
	byName := map[string]policy.Policy{}
	for _, p := range policies(s.cur.Load()) {
		byName[p.Name] = p
	}
	for _, p := range policies(next) {
		byName[p.Name] = p
	}
	out := make([]policy.Policy, 0, len(byName))
	for _, p := range byName {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the policy name, or policy.ErrUnknownPolicy.
func (s *Source) Get(ctx context.Context, name string) (policy.Policy, error) {
	ps, _ := s.List(ctx)
	if i := slices.IndexFunc(ps, func(p policy.Policy) bool { return p.Name == name }); i >= 0 {
		return ps[i], nil
	}
	return policy.Policy{}, fmt.Errorf("%w: %q", policy.ErrUnknownPolicy, name)
}

// Create returns policy.ErrReadOnly: the files are the configuration.
func (s *Source) Create(context.Context, policy.Policy, string) (policy.Policy, error) {
	return policy.Policy{}, policy.ErrReadOnly
}

// Update returns policy.ErrReadOnly.
func (s *Source) Update(context.Context, policy.Policy, string) (policy.Policy, error) {
	return policy.Policy{}, policy.ErrReadOnly
}

// Delete returns policy.ErrReadOnly.
func (s *Source) Delete(context.Context, string, int64, string) error { return policy.ErrReadOnly }

// Watch reads the files every Interval until stop is called. A new valid
// configuration is applied in three steps, so that no call finds a rule
// without its limiters: changed is called with List serving the old and
// the new policies, then the new configuration is served, then changed is
// called again with List serving only the new ones.
func (s *Source) Watch(changed func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			cfg, changed1 := s.reload()
			if !changed1 || cfg == nil {
				continue
			}
			s.mu.Lock()
			s.next = cfg
			s.mu.Unlock()
			changed()
			s.cur.Store(cfg)
			s.mu.Lock()
			s.next = nil
			s.mu.Unlock()
			changed()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}
