package policy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/slidinglog"
)

// closingFactory is a Factory that notes when it is closed.
type closingFactory struct {
	Factory
	name, alg string
	log       *factoryLog
}

// Reconfigure is the memory factory's: a change of limit is made in place.
func (f *closingFactory) Reconfigure(cfg ratelimit.Config) error {
	return f.Factory.(interface{ Reconfigure(ratelimit.Config) error }).Reconfigure(cfg)
}

func (f *closingFactory) Close() error {
	f.log.mu.Lock()
	defer f.log.mu.Unlock()
	f.log.open[f.name+"/"+f.alg]--
	return nil
}

type factoryLog struct {
	mu   sync.Mutex
	open map[string]int // name/algorithm -> factories made and not closed
}

func (l *factoryLog) get() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, n := range l.open {
		if n != 0 {
			out[k] = n
		}
	}
	return out
}

// A Factory that is an io.Closer is closed when the registry no longer
// uses it, and only then: its policy deleted, its limiters replaced, the
// registry closed; a change in place keeps it.
func TestRegistryClosesFactories(t *testing.T) {
	ctx := context.Background()
	log := &factoryLog{open: map[string]int{}}
	backend := func(p Policy) (Factory, error) {
		f, err := Memory()(p)
		if err != nil {
			return nil, err
		}
		log.mu.Lock()
		log.open[p.Name+"/"+p.Algorithm()]++
		log.mu.Unlock()
		return &closingFactory{Factory: f, name: p.Name, alg: p.Algorithm(), log: log}, nil
	}
	s := NewMemoryStore()
	for _, p := range []Policy{window("a", 5, "user", "web"), window("b", 5, "user", "web")} {
		if _, err := s.Create(ctx, p, "test"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRegistry(ctx, s, Options{Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want map[string]int) {
		t.Helper()
		if err := r.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if got := log.get(); len(got) != len(want) || func() bool {
			for k, n := range want {
				if got[k] != n {
					return true
				}
			}
			return false
		}() {
			t.Fatalf("%s: open factories %v, want %v", step, got, want)
		}
	}
	check("start", map[string]int{"a/fixedwindow": 1, "b/fixedwindow": 1})

	if n := grants(t, r, "a", "k", "web", 3); n != 3 {
		t.Fatalf("a granted %d of 3", n)
	}
	update(t, s, window("a", 7, "user", "web"))
	check("a change in place", map[string]int{"a/fixedwindow": 1, "b/fixedwindow": 1})
	if n := grants(t, r, "a", "k", "web", 7); n != 4 {
		t.Fatalf("after a change in place from 5 to 7, a key that took 3 was granted %d more, want 4 (its count kept)", n)
	}

	p := window("a", 7, "user", "web")
	p.Config = slidinglog.Config{Limit: 7, Window: time.Hour}
	update(t, s, p)
	check("a change of algorithm", map[string]int{"a/slidinglog": 1, "b/fixedwindow": 1})

	update(t, s, window("b", 5, "ip", "web"))
	check("a change of key kind", map[string]int{"a/slidinglog": 1, "b/fixedwindow": 1})

	if err := s.Delete(ctx, "a", 0, "test"); err != nil {
		t.Fatal(err)
	}
	check("a deletion", map[string]int{"b/fixedwindow": 1})

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := log.get(); len(got) != 0 {
		t.Fatalf("after Close: open factories %v", got)
	}
}
