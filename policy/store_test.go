package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/tokenbucket"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

func login(r float64, burst int) Policy {
	return Policy{Name: "login", Config: tokenbucket.Config{Rate: rate.Limit(r), Burst: burst}, Key: "ip", Apps: []string{"web"}}
}

func newMiniStore(t *testing.T) (*RedisStore, goredis.UniversalClient) {
	t.Helper()
	m := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedisStore(c, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func newRealClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func newRealStore(t *testing.T) (*RedisStore, goredis.UniversalClient) {
	t.Helper()
	c := newRealClient(t, redistest.Standalone(t))
	s, err := NewRedisStore(c, RedisOptions{Prefix: "test:" + t.Name() + ":"})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestStores(t *testing.T) {
	stores := map[string]func(t *testing.T) Store{
		"memory":    func(t *testing.T) Store { return NewMemoryStore() },
		"miniredis": func(t *testing.T) Store { s, _ := newMiniStore(t); return s },
		"redis":     func(t *testing.T) Store { s, _ := newRealStore(t); return s },
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) { testStore(t, mk(t)) })
	}
}

// testStore checks a writable store's contract.
func testStore(t *testing.T, s Store) {
	ctx := context.Background()
	changes := make(chan struct{}, 100)
	stop := s.Watch(func() { changes <- struct{}{} })
	defer stop()
	expectChange := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(2 * time.Second):
			t.Fatalf("no change notified after %s", what)
		}
	}
	drain := func() {
		for {
			select {
			case <-changes:
			case <-time.After(50 * time.Millisecond):
				return
			}
		}
	}
	drain() // a subscription's first notice

	if _, err := s.Get(ctx, "login"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("Get of nothing: %v", err)
	}
	p, err := s.Create(ctx, login(5, 10), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 || p.CreatedBy != "alice" || p.UpdatedBy != "alice" || p.CreatedAt.IsZero() || !p.UpdatedAt.Equal(p.CreatedAt) {
		t.Fatalf("created %+v", p)
	}
	expectChange("create")
	got, err := s.Get(ctx, "login")
	if err != nil || got.Version != 1 || got.Config != p.Config || !got.CreatedAt.Equal(p.CreatedAt) || got.CreatedBy != "alice" {
		t.Fatalf("Get: %+v %v", got, err)
	}
	if _, err := s.Create(ctx, login(5, 10), "bob"); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v", err)
	}
	if _, err := s.Create(ctx, Policy{Name: "bad"}, "bob"); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("invalid Create: %v", err)
	}
	if _, err := s.Create(ctx, login(5, 10), "bob\x00"); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Create by an unprintable actor: %v", err)
	}
	if _, err := s.Update(ctx, p, "bob\n"); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Update by an unprintable actor: %v", err)
	}

	// Two edits from version 1: one wins, the other conflicts.
	time.Sleep(2 * time.Millisecond)
	a, b := login(5, 20), login(5, 30)
	a.Version, b.Version = 1, 1
	pa, err := s.Update(ctx, a, "bob")
	if err != nil || pa.Version != 2 || pa.UpdatedBy != "bob" || pa.CreatedBy != "alice" || !pa.UpdatedAt.After(pa.CreatedAt) {
		t.Fatalf("Update: %+v %v", pa, err)
	}
	expectChange("update")
	if _, err := s.Update(ctx, b, "carol"); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale Update: %v", err)
	}
	if got, _ := s.Get(ctx, "login"); got.Config.(tokenbucket.Config).Burst != 20 {
		t.Fatalf("after a conflict: %+v", got)
	}
	if _, err := s.Update(ctx, Policy{Name: "nope", Config: fixedwindow.Config{Limit: 1, Window: time.Second}, Key: "ip", Apps: []string{"a"}, Version: 1}, "x"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("Update of nothing: %v", err)
	}

	// Different policies: both kept.
	other := Policy{Name: "search", Config: fixedwindow.Config{Limit: 100, Window: time.Minute}, Key: Global, Apps: []string{AnyApp}}
	if _, err := s.Create(ctx, other, "dave"); err != nil {
		t.Fatal(err)
	}
	ps, err := s.List(ctx)
	if err != nil || len(ps) != 2 || ps[0].Name != "login" || ps[1].Name != "search" {
		t.Fatalf("List: %+v %v", ps, err)
	}

	if err := s.Delete(ctx, "login", 1, "x"); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale Delete: %v", err)
	}
	if err := s.Delete(ctx, "login", 2, "x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "login", 0, "x"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("second Delete: %v", err)
	}
	// A name created again never reuses a version.
	p, err = s.Create(ctx, login(5, 10), "erin")
	if err != nil || p.Version <= 2 {
		t.Fatalf("Create after Delete: %+v %v", p, err)
	}
	stale := login(5, 40)
	stale.Version = 1
	if _, err := s.Update(ctx, stale, "x"); !errors.Is(err, ErrConflict) {
		t.Fatalf("Update of an older incarnation: %v", err)
	}
}

// Many goroutines edit one policy from what they read: every edit that
// succeeds is one version, none is lost.
func TestStoreConcurrentEdits(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) Store{
		"memory":    func(t *testing.T) Store { return NewMemoryStore() },
		"miniredis": func(t *testing.T) Store { s, _ := newMiniStore(t); return s },
	} {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			if _, err := s.Create(ctx, login(5, 1), "a"); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			wins := 0
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						cur, err := s.Get(ctx, "login")
						if err != nil {
							t.Error(err)
							return
						}
						p := login(5, 1+g)
						p.Version = cur.Version
						_, err = s.Update(ctx, p, "g")
						switch {
						case err == nil:
							mu.Lock()
							wins++
							mu.Unlock()
						case !errors.Is(err, ErrConflict):
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			got, _ := s.Get(ctx, "login")
			if got.Version != int64(1+wins) {
				t.Fatalf("version %d after %d successful edits", got.Version, wins)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFileStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.json")
	writeFile(t, path, `{"policies":[{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"key":"ip","apps":["web"]}]}`)
	var errMu sync.Mutex
	var errs []error
	s, err := NewFileStore(path, FileOptions{Interval: 10 * time.Millisecond, OnError: func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	changes := make(chan struct{}, 10)
	stop := s.Watch(func() { changes <- struct{}{} })
	defer stop()
	if _, err := s.Create(ctx, login(5, 1), "x"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Create: %v", err)
	}
	if err := s.Delete(ctx, "login", 0, "x"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Delete: %v", err)
	}

	writeFile(t, path, `{"policies":[{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":20},"key":"ip","apps":["web"],"version":7}]}`)
	select {
	case <-changes:
	case <-time.After(2 * time.Second):
		t.Fatal("no reload")
	}
	p, err := s.Get(ctx, "login")
	if err != nil || p.Config.(tokenbucket.Config).Burst != 20 || p.Version != 7 {
		t.Fatalf("after reload: %+v %v", p, err)
	}

	// An invalid file changes nothing and is reported.
	writeFile(t, path, `{"policies":[{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":-5,"burst":20},"key":"ip","apps":["web"]}]}`)
	deadline := time.Now().Add(2 * time.Second)
	for {
		errMu.Lock()
		n := len(errs)
		errMu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("invalid file not reported")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-changes:
		t.Fatal("an invalid file notified a change")
	default:
	}
	if p, _ := s.Get(ctx, "login"); p.Config.(tokenbucket.Config).Burst != 20 {
		t.Fatalf("an invalid file changed the policies: %+v", p)
	}
	if _, err := ParseFile([]byte(`{"policies":[{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]},{"name":"a","algorithm":"concurrency","concurrency":{"limit":1},"key":"ip","apps":["web"]}]}`)); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := NewFileStore(filepath.Join(t.TempDir(), "missing.json"), FileOptions{}); err == nil {
		t.Fatal("a missing file")
	}
}
