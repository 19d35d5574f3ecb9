package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/control"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/slidingwindow"
	"github.com/limitkit/ratelimit/tokenbucket"
	goredis "github.com/redis/go-redis/v9"
)

var (
	_ ratelimit.Keyed      = keyed{} // so Middleware takes a policy
	_ httplimit.Configured = keyed{} // and follows its changes
)

func window(name string, limit int, key string, apps ...string) Policy {
	return Policy{Name: name, Config: fixedwindow.Config{Limit: limit, Window: time.Hour}, Key: key, Apps: apps}
}

func newRegistry(t *testing.T, s Store, opts Options) *Registry {
	t.Helper()
	r, err := NewRegistry(context.Background(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// grants counts the permits Acquire grants, one at a time, up to n tries.
func grants(t *testing.T, r *Registry, name, key, app string, n int) int {
	t.Helper()
	got := 0
	for range n {
		l, err := r.Acquire(context.Background(), name, key, app, 1)
		if err != nil {
			t.Fatal(err)
		}
		if l.Acquired() {
			got++
		}
	}
	return got
}

// waitFor polls cond until it holds, or fails after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRegistryDecides(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	s.Create(ctx, window("per-user", 2, "user", "web"), "a")
	s.Create(ctx, window("global", 3, Global, AnyApp), "a")
	r := newRegistry(t, s, Options{})

	if got := grants(t, r, "per-user", "u1", "web", 5); got != 2 {
		t.Errorf("u1: %d grants, want 2", got)
	}
	if got := grants(t, r, "per-user", "u2", "web", 5); got != 2 {
		t.Errorf("u2: %d grants, want 2 (a limit per key)", got)
	}
	if got := grants(t, r, "global", "u1", "x", 2) + grants(t, r, "global", "u2", "y", 2); got != 3 {
		t.Errorf("global: %d grants, want 3 (one limit for every key)", got)
	}
	if _, err := r.Acquire(ctx, "per-user", "u3", "batch", 1); !errors.Is(err, ErrForbidden) {
		t.Errorf("an application not listed: %v", err)
	}
	if _, err := r.Acquire(ctx, "nope", "u3", "web", 1); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("an unknown policy: %v", err)
	}
	if _, err := r.Acquire(ctx, "per-user", "", "web", 1); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("an empty key: %v", err)
	}
	if _, err := r.Acquire(ctx, "per-user", "u3", "web", -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Errorf("negative permits: %v", err)
	}
	// Peek takes nothing.
	for range 3 {
		l, err := r.Peek(ctx, "per-user", "u4")
		if err != nil || !l.Acquired() || l.Remaining() != 2 || l.Limit() != 2 {
			t.Fatalf("Peek: %v %v", l, err)
		}
	}
	l, _ := r.Peek(ctx, "per-user", "u1")
	if l.Acquired() || l.Remaining() != 0 {
		t.Errorf("Peek of an exhausted key: %v", l)
	}
	if d, ok := l.RetryAfter(); !ok || d <= 0 {
		t.Errorf("Peek of an exhausted key: RetryAfter %v %v", d, ok)
	}
	if err := r.Reset(ctx, "per-user", "u1"); err != nil {
		t.Fatal(err)
	}
	if got := grants(t, r, "per-user", "u1", "web", 5); got != 2 {
		t.Errorf("after Reset: %d grants, want 2", got)
	}
	k := r.Keyed("per-user", "web")
	if l, err := k.Acquire(ctx, "u5", 1); err != nil || !l.Acquired() {
		t.Errorf("Keyed: %v %v", l, err)
	}
	var _ ratelimit.Keyed = k
	second, _ := k.Acquire(ctx, "u5", 1) // the last of 2
	if err := control.Refund(ctx, k.(keyed).For("u5"), second, 1); err != nil {
		t.Fatalf("Keyed.Refund: %v", err)
	}
	if l, err := k.Acquire(ctx, "u5", 1); err != nil || !l.Acquired() {
		t.Errorf("Keyed after a refund: %v %v, want granted", l, err)
	}
	if l, _ := k.Acquire(ctx, "u5", 1); l.Acquired() {
		t.Errorf("a third grant of 2: %v", l)
	}
	if _, err := r.Keyed("per-user", "batch").Wait(ctx, "u5", 1); !errors.Is(err, ErrForbidden) {
		t.Errorf("Keyed of an application not listed: %v", err)
	}
	if ps := r.Policies(); len(ps) != 2 || ps[0].Name != "global" {
		t.Errorf("Policies: %+v", ps)
	}
	r.Close()
	if _, err := r.Acquire(ctx, "per-user", "u1", "web", 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func update(t *testing.T, s Store, p Policy) Policy {
	t.Helper()
	cur, err := s.Get(context.Background(), p.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Version = cur.Version
	p, err = s.Update(context.Background(), p, "test")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func applied(r *Registry, name string, version int64) func() bool {
	return func() bool { p, ok := r.Policy(name); return ok && p.Version == version }
}

func TestRegistryFollowsChanges(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	s.Create(ctx, window("p", 3, "user", "web"), "a")
	r := newRegistry(t, s, Options{})
	if got := grants(t, r, "p", "u", "web", 2); got != 2 {
		t.Fatalf("%d grants", got)
	}

	// Same algorithm: reconfigured in place, the window's count carries over.
	v := update(t, s, window("p", 5, "user", "web")).Version
	waitFor(t, time.Second, "the update", applied(r, "p", v))
	if got := grants(t, r, "p", "u", "web", 10); got != 3 {
		t.Errorf("after raising 3 to 5 with 2 taken: %d grants, want 3", got)
	}
	v = update(t, s, window("p", 2, "user", "web")).Version
	waitFor(t, time.Second, "the update", applied(r, "p", v))
	if got := grants(t, r, "p", "u", "web", 10); got != 0 {
		t.Errorf("after lowering to 2 with 5 taken: %d grants, want 0", got)
	}

	// Apps alone.
	v = update(t, s, window("p", 2, "user", "mobile")).Version
	waitFor(t, time.Second, "the update", applied(r, "p", v))
	if _, err := r.Acquire(ctx, "p", "u", "web", 1); !errors.Is(err, ErrForbidden) {
		t.Errorf("web after it was removed: %v", err)
	}
	if got := grants(t, r, "p", "u2", "mobile", 5); got != 2 {
		t.Errorf("mobile: %d grants", got)
	}

	// Another algorithm: replaced, starting afresh.
	p := Policy{Name: "p", Config: slidinglog.Config{Limit: 4, Window: time.Hour}, Key: "user", Apps: []string{"mobile"}}
	v = update(t, s, p).Version
	waitFor(t, time.Second, "the update", applied(r, "p", v))
	if got := grants(t, r, "p", "u2", "mobile", 10); got != 4 {
		t.Errorf("after a change of algorithm: %d grants, want 4 (a fresh limiter)", got)
	}

	// Deleted.
	if err := s.Delete(ctx, "p", 0, "x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the deletion", func() bool { _, ok := r.Policy("p"); return !ok })
	if _, err := r.Acquire(ctx, "p", "u2", "mobile", 1); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("after Delete: %v", err)
	}
}

// A change of each algorithm, as the registry applies it: what a key has
// taken counts against the new limit, so a change never admits more than
// the larger of the two limits.
func TestRegistryChangePerAlgorithm(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		from, to   ratelimit.Config
		take, more int
	}{
		{"tokenbucket up", tokenbucket.Config{Rate: 0.001, Burst: 4}, tokenbucket.Config{Rate: 0.001, Burst: 8}, 4, 0},
		{"tokenbucket down", tokenbucket.Config{Rate: 0.001, Burst: 8}, tokenbucket.Config{Rate: 0.001, Burst: 2}, 1, 2}, // 7 tokens clamped to 2
		{"fixedwindow up", fixedwindow.Config{Limit: 4, Window: time.Hour}, fixedwindow.Config{Limit: 8, Window: time.Hour}, 4, 4},
		{"fixedwindow down", fixedwindow.Config{Limit: 8, Window: time.Hour}, fixedwindow.Config{Limit: 2, Window: time.Hour}, 1, 1},
		{"slidinglog up", slidinglog.Config{Limit: 4, Window: time.Hour}, slidinglog.Config{Limit: 8, Window: time.Hour}, 4, 4},
		{"tokenbucket interval up", tokenbucket.Config{Period: time.Hour, PerPeriod: 1, Burst: 4}, tokenbucket.Config{Period: time.Hour, PerPeriod: 1, Burst: 8}, 4, 0},
		{"slidingwindow segmented up", slidingwindow.Config{Limit: 4, Window: time.Hour, Segments: 4}, slidingwindow.Config{Limit: 8, Window: time.Hour, Segments: 4}, 4, 4},
		{"slidingwindow weighted down", slidingwindow.Config{Limit: 8, Window: time.Hour}, slidingwindow.Config{Limit: 2, Window: time.Hour}, 1, 1},
		{"slidinglog down", slidinglog.Config{Limit: 8, Window: time.Hour}, slidinglog.Config{Limit: 2, Window: time.Hour}, 3, 0},
		{"concurrency up", concurrency.Config{Limit: 4}, concurrency.Config{Limit: 8}, 4, 4},
		{"concurrency down", concurrency.Config{Limit: 8}, concurrency.Config{Limit: 2}, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewMemoryStore()
			s.Create(ctx, Policy{Name: "p", Config: c.from, Key: "user", Apps: []string{"web"}}, "a")
			r := newRegistry(t, s, Options{})
			if got := grants(t, r, "p", "u", "web", c.take); got != c.take {
				t.Fatalf("%d grants before", got)
			}
			v := update(t, s, Policy{Name: "p", Config: c.to, Key: "user", Apps: []string{"web"}}).Version
			waitFor(t, time.Second, "the update", applied(r, "p", v))
			if got := grants(t, r, "p", "u", "web", 20); got != c.more {
				t.Errorf("%d grants after the change, want %d", got, c.more)
			}
		})
	}
}

// A waiter on a policy whose limiters are replaced (a change of algorithm)
// waits on the new ones.
func TestRegistryWaitAcrossReplacement(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	s.Create(ctx, Policy{Name: "p", Config: concurrency.Config{Limit: 1}, Key: Global, Apps: []string{"web"}}, "a")
	r := newRegistry(t, s, Options{})
	held, err := r.Acquire(ctx, "p", "", "web", 1)
	if err != nil || !held.Acquired() {
		t.Fatal(held, err)
	}
	done := make(chan ratelimit.Lease)
	go func() {
		l, err := r.Wait(ctx, "p", "", "web", 1)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	time.Sleep(20 * time.Millisecond) // let it queue
	update(t, s, Policy{Name: "p", Config: fixedwindow.Config{Limit: 5, Window: time.Hour}, Key: Global, Apps: []string{"web"}})
	select {
	case l := <-done:
		if !l.Acquired() || l.Limit() != 5 {
			t.Fatalf("the waiter got %v", l)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not served by the new limiter")
	}
	held.Release()
}

func TestRegistryFileStore(t *testing.T) {
	path := t.TempDir() + "/policies.json"
	writeFile(t, path, `{"policies":[{"name":"p","algorithm":"fixedwindow","fixedwindow":{"limit":2,"window":"1h"},"key":"user","apps":["web"]}]}`)
	s, err := NewFileStore(path, FileOptions{Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, s, Options{})
	if got := grants(t, r, "p", "u", "web", 5); got != 2 {
		t.Fatalf("%d grants", got)
	}
	writeFile(t, path, `{"policies":[{"name":"p","algorithm":"fixedwindow","fixedwindow":{"limit":4,"window":"1h"},"key":"user","apps":["web"]}]}`)
	waitFor(t, 2*time.Second, "the file's change", func() bool {
		p, _ := r.Policy("p")
		return p.Config.(fixedwindow.Config).Limit == 4
	})
	if got := grants(t, r, "p", "u", "web", 5); got != 2 {
		t.Fatalf("%d grants after raising 2 to 4 with 2 taken", got)
	}
	writeFile(t, path, `{"policies":[]}`)
	waitFor(t, 2*time.Second, "the deletion", func() bool { _, ok := r.Policy("p"); return !ok })
}

// A store that cannot be read fails NewRegistry, leaving nothing running
// (goleak checks).
func TestRegistryUnreachableStore(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	s, err := NewRedisStore(c, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := NewRegistry(ctx, s, Options{}); err == nil {
		t.Fatal("NewRegistry on an unreachable store")
	}
}

// Decisions run on while the policy changes back and forth: no error, and no
// data race (the race detector watches).
func TestRegistryConcurrentChanges(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	s.Create(ctx, window("p", 1000, "user", "web"), "a")
	r := newRegistry(t, s, Options{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				_, err := r.Acquire(ctx, "p", string(rune('a'+(i+g)%8)), "web", 1)
				if err != nil && !errors.Is(err, ErrForbidden) {
					t.Error(err)
					return
				}
			}
		}()
	}
	configs := []Policy{
		window("p", 500, "user", "web"),
		{Name: "p", Config: tokenbucket.Config{Rate: 100, Burst: 50}, Key: "user", Apps: []string{"web"}},
		window("p", 2000, "user", "web", "mobile"),
		window("p", 2000, "ip", "web"),
	}
	for i := range 40 {
		update(t, s, configs[i%len(configs)])
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
}

// BenchmarkRegistry measures what a policy lookup adds to a decision: the
// same memory.Keyed asked directly, and through the registry.
func BenchmarkRegistry(b *testing.B) {
	ctx := context.Background()
	cfg := tokenbucket.Config{Rate: 1e9, Burst: 1 << 30}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + string(rune('A'+i%26)) + string(rune('a'+i/26%26)) + string(rune('0'+i/676))
	}
	b.Run("plain", func(b *testing.B) {
		lim, err := memory.NewKeyed(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer lim.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := lim.Acquire(ctx, keys[i&1023], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("registry", func(b *testing.B) {
		s := NewMemoryStore()
		s.Create(ctx, Policy{Name: "api", Config: cfg, Key: "user", Apps: []string{"web", "mobile"}}, "a")
		for i := range 20 { // a registry of several policies
			s.Create(ctx, window("other-"+string(rune('a'+i)), 10, "user", "web"), "a")
		}
		r, err := NewRegistry(ctx, s, Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := r.Acquire(ctx, "api", keys[i&1023], "mobile", 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// Over both backends, a change of config is made in place (the policy keeps
// its limiters) and a change of algorithm replaces them.
func TestRegistryInPlace(t *testing.T) {
	for name, backend := range map[string]func(t *testing.T) Backend{
		"memory": func(t *testing.T) Backend { return Memory() },
		"miniredis": func(t *testing.T) Backend {
			_, c := newMiniStore(t)
			return Redis(c)
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := NewMemoryStore()
			s.Create(ctx, window("p", 3, "user", "web"), "a")
			r := newRegistry(t, s, Options{Backend: backend(t)})
			entry := func() *entry { return (*r.entries.Load())["p"] }
			first := entry()
			if got := grants(t, r, "p", "u", "web", 2); got != 2 {
				t.Fatalf("%d grants", got)
			}
			v := update(t, s, window("p", 5, "user", "web")).Version
			waitFor(t, time.Second, "the update", applied(r, "p", v))
			if entry() != first {
				t.Error("a change of limit replaced the limiters")
			}
			if got := grants(t, r, "p", "u", "web", 10); got != 3 {
				t.Errorf("after raising 3 to 5 with 2 taken: %d grants, want 3", got)
			}
			v = update(t, s, Policy{Name: "p", Config: slidinglog.Config{Limit: 4, Window: time.Hour}, Key: "user", Apps: []string{"web"}}).Version
			waitFor(t, time.Second, "the update", applied(r, "p", v))
			if entry() == first {
				t.Error("a change of algorithm kept the limiters")
			}
		})
	}
}

// On Redis, a change of window length is made in place, on the same
// keys: the new window holds the old one's count. So is a switch between
// the weighted and segmented sliding windows: the new form holds the old
// one's count, and the old form's keys are deleted.
func TestRegistryRedisLayoutChange(t *testing.T) {
	r, s, c := redisRegistry(t)
	first := (*r.entries.Load())["p"]
	if got := grants(t, r, "p", "u", "web", 5); got != 3 {
		t.Fatalf("%d grants", got)
	}
	p := window("p", 5, "user", "web")
	// reconfigure stores cfg as p's and waits until the registry applies it.
	reconfigure := func(cfg ratelimit.Config) {
		t.Helper()
		p.Config = cfg
		v := update(t, s, p).Version
		waitFor(t, time.Second, "the update", applied(r, "p", v))
	}
	keysAre := func(want ...string) { t.Helper(); redisKeysAre(t, c, want...) }
	reconfigure(fixedwindow.Config{Limit: 5, Window: 2 * time.Hour})
	if (*r.entries.Load())["p"] != first {
		t.Error("a change of window length replaced the limiters")
	}
	if got := grants(t, r, "p", "u", "web", 5); got != 2 {
		t.Errorf("%d grants in the new window, want 2 (3 carried of 5)", got)
	}
	keysAre("limitkit:limit:p:user:{u}:fw")

	reconfigure(slidingwindow.Config{Limit: 3, Window: time.Hour})
	weighted := (*r.entries.Load())["p"]
	if got := grants(t, r, "p", "u", "web", 2); got != 2 {
		t.Fatalf("%d grants", got)
	}
	reconfigure(slidingwindow.Config{Limit: 3, Window: 2 * time.Hour})
	if (*r.entries.Load())["p"] != weighted {
		t.Error("a change of window length replaced the weighted window's limiters")
	}
	if got := grants(t, r, "p", "u", "web", 5); got != 1 {
		t.Errorf("%d grants after the weighted window's length changed, want 1 (2 carried of 3)", got)
	}
	reconfigure(slidingwindow.Config{Limit: 3, Window: 2 * time.Hour, Segments: 4})
	if (*r.entries.Load())["p"] != weighted {
		t.Error("a switch to the segmented form replaced the limiters")
	}
	if got := grants(t, r, "p", "u", "web", 5); got != 0 {
		t.Errorf("%d grants in the segmented window, want 0 (3 carried of 3)", got)
	}
	keysAre("limitkit:limit:p:user:{u}:fw", "limitkit:limit:p:user:{u}:sgc", "limitkit:limit:p:user:{u}:sgc:m")
	// And back: the log's count is held once, its keys deleted.
	reconfigure(slidingwindow.Config{Limit: 4, Window: 2 * time.Hour})
	if (*r.entries.Load())["p"] != weighted {
		t.Error("a switch to the weighted form replaced the limiters")
	}
	if got := grants(t, r, "p", "u", "web", 5); got != 1 {
		t.Errorf("%d grants in the weighted window, want 1 (3 carried of 4)", got)
	}
	keysAre("limitkit:limit:p:user:{u}:fw", "limitkit:limit:p:user:{u}:sw")
}

// On Redis, a change of a policy's key kind starts on keys of its own: a
// user named "global" whose count is spent hands nothing to the global
// limit the policy becomes, nor does the global limit to an IP named
// "global" when it becomes per IP again.
func TestRegistryRedisKeyKindChange(t *testing.T) {
	r, s, c := redisRegistry(t)
	if got := grants(t, r, "p", "global", "web", 5); got != 3 {
		t.Fatalf("%d grants to the user named global, want 3", got)
	}
	for i, kind := range []string{Global, "ip"} {
		v := update(t, s, window("p", 3, kind, "web")).Version
		waitFor(t, time.Second, "the update", applied(r, "p", v))
		if got := grants(t, r, "p", "global", "web", 5); got != 3 {
			t.Errorf("change %d, to key %q: %d grants, want 3 (a count of its own)", i, kind, got)
		}
	}
	redisKeysAre(t, c, "limitkit:limit:p:global:{global}:fw", "limitkit:limit:p:ip:{global}:fw", "limitkit:limit:p:user:{global}:fw")
}

// redisRegistry returns a registry on a Redis backend (miniredis) of one
// policy, p (3 per hour per user, for web), with its store and client.
func redisRegistry(t *testing.T) (*Registry, *MemoryStore, goredis.UniversalClient) {
	t.Helper()
	_, c := newMiniStore(t)
	s := NewMemoryStore()
	if _, err := s.Create(context.Background(), window("p", 3, "user", "web"), "a"); err != nil {
		t.Fatal(err)
	}
	return newRegistry(t, s, Options{Backend: Redis(c)}), s, c
}

// redisKeysAre checks the Redis keys of policy p's limiters.
func redisKeysAre(t *testing.T, c goredis.UniversalClient, want ...string) {
	t.Helper()
	keys, _ := c.Keys(context.Background(), "limitkit:limit:p:*").Result()
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}

// A stored policy that no longer decodes (written by a newer version, or by
// hand) blocks nothing: List returns the others with an *UndecodableError
// naming it, the registry applies the others' changes and keeps what it
// applied of it, and reports the error.
func TestRegistryUndecodablePolicy(t *testing.T) {
	ctx := context.Background()
	s, c := newMiniStore(t)
	for _, name := range []string{"a", "b"} {
		if _, err := s.Create(ctx, window(name, 3, "user", "web"), "test"); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var reported []error
	r := newRegistry(t, s, Options{OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	if err := c.HSet(ctx, s.defs, "a", `{"name":"a","algorithm":"from-the-future"}`).Err(); err != nil {
		t.Fatal(err)
	}
	v := update(t, s, window("b", 5, "user", "web")).Version
	waitFor(t, time.Second, "the update of b", applied(r, "b", v))
	if got := grants(t, r, "b", "u", "web", 9); got != 5 {
		t.Errorf("b: %d grants, want 5 (its update applied)", got)
	}
	if got := grants(t, r, "a", "u", "web", 9); got != 3 {
		t.Errorf("a: %d grants, want 3 (its previous version kept)", got)
	}
	ps, err := s.List(ctx)
	var bad *UndecodableError
	if !errors.As(err, &bad) || !slices.Equal(bad.Names, []string{"a"}) || len(ps) != 1 || ps[0].Name != "b" {
		t.Fatalf("List: %v, %v; want b and an UndecodableError naming a", ps, err)
	}
	if err := r.Reload(ctx); !errors.As(err, &bad) {
		t.Errorf("Reload: %v; want the UndecodableError", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) == 0 || !errors.As(reported[0], &bad) {
		t.Errorf("reported %v; want the UndecodableError", reported)
	}
}

// The admin API lists what decodes and names what does not.
func TestAdminListsUndecodable(t *testing.T) {
	ctx := context.Background()
	s, c := newMiniStore(t)
	if _, err := s.Create(ctx, window("b", 3, "user", "web"), "test"); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, s.defs, "a", `not json`).Err(); err != nil {
		t.Fatal(err)
	}
	c.HSet(ctx, s.versions, "a", "1")
	h, err := NewAdmin(newRegistry(t, s, Options{}), AdminOptions{Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/policies", nil)
	req.Header.Set("Authorization", "Bearer t")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var got struct {
		Policies    []Policy `json:"policies"`
		Undecodable []string `json:"undecodable"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	if len(got.Policies) != 1 || got.Policies[0].Name != "b" || !slices.Equal(got.Undecodable, []string{"a"}) {
		t.Errorf("listed %v, undecodable %v; want b, and a undecodable", got.Policies, got.Undecodable)
	}
	do := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := do("GET", "/policies/a", ""); w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "replace it") {
		t.Errorf("GET of the undecodable policy: %d %s; want 500, saying how to mend it", w.Code, w.Body)
	}
	// Replaced at its stored version: the store holds it again.
	body := `{"name":"a","algorithm":"fixedwindow","fixedwindow":{"limit":2,"window":"1m"},"key":"user","apps":["*"],"version":1}`
	if w := do("PUT", "/policies/a", body); w.Code != http.StatusOK {
		t.Fatalf("PUT over the undecodable policy: %d %s", w.Code, w.Body)
	}
	if ps, err := s.List(ctx); err != nil || len(ps) != 2 {
		t.Errorf("after the PUT: %v, %v; want both policies", ps, err)
	}
}

// The HTTP middleware over a policy (Keyed) announces the policy as it is
// now: a live change of its window changes RateLimit-Policy's w, and one to
// a concurrency limit adds its quota unit.
func TestKeyedMiddlewareFollowsChanges(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	s.Create(ctx, window("p", 3, "user", "web"), "a")
	r := newRegistry(t, s, Options{})
	h, err := httplimit.Middleware(r.Keyed("p", "web"), httplimit.Options{Policy: "p", Key: func(*http.Request) string { return "u" }})
	if err != nil {
		t.Fatal(err)
	}
	handler := h(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	policyField := func() string {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w.Header().Get("RateLimit-Policy")
	}
	if got, want := policyField(), `"p";q=3;w=3600`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	p := window("p", 3, "user", "web")
	p.Config = fixedwindow.Config{Limit: 3, Window: 2 * time.Hour}
	waitFor(t, time.Second, "the update", applied(r, "p", update(t, s, p).Version))
	if got, want := policyField(), `"p";q=3;w=7200`; got != want {
		t.Errorf("after the window's change: RateLimit-Policy %q, want %q", got, want)
	}
	p.Config = concurrency.Config{Limit: 4}
	waitFor(t, time.Second, "the update", applied(r, "p", update(t, s, p).Version))
	if got, want := policyField(), `"p";q=4;qu="concurrent-requests"`; got != want {
		t.Errorf("after the change to a concurrency limit: RateLimit-Policy %q, want %q", got, want)
	}
}

// passOnStore is a Store whose List passes an error on with no policies,
// as a wrapper written "if err != nil { return nil, err }" does.
type passOnStore struct{ *RedisStore }

func (s passOnStore) List(ctx context.Context) ([]Policy, error) {
	ps, err := s.RedisStore.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("instrumented: %w", err)
	}
	return ps, nil
}

// An UndecodableError with no policies is a store that could not be read:
// the registry keeps every policy as it is.
func TestRegistryUndecodableWithoutPolicies(t *testing.T) {
	ctx := context.Background()
	s, c := newMiniStore(t)
	for _, name := range []string{"a", "b"} {
		if _, err := s.Create(ctx, window(name, 3, "user", "web"), "test"); err != nil {
			t.Fatal(err)
		}
	}
	r := newRegistry(t, passOnStore{s}, Options{})
	if err := c.HSet(ctx, s.defs, "a", `not json`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(ctx); err == nil {
		t.Error("Reload: nil error")
	}
	if got := len(r.Policies()); got != 2 {
		t.Errorf("%d policies applied, want both kept", got)
	}
}
