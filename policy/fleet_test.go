package policy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// process stands for one process of a fleet: its own go-redis client,
// store, registry and admin API.
type process struct {
	client *goredis.Client
	store  *RedisStore
	reg    *Registry
	admin  *httptest.Server
}

func startProcess(t *testing.T, addr, prefix string, reload time.Duration) *process {
	t.Helper()
	c := newRealClient(t, addr)
	s, err := NewRedisStore(c, RedisOptions{Prefix: prefix, ReloadInterval: reload, OnError: func(err error) { t.Logf("store: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(context.Background(), s, Options{Backend: Redis(c), OnError: func(err error) { t.Logf("registry: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewAdmin(reg, AdminOptions{Token: writeToken})
	if err != nil {
		t.Fatal(err)
	}
	p := &process{client: c, store: s, reg: reg, admin: httptest.NewServer(h)}
	t.Cleanup(func() {
		p.admin.Close()
		p.reg.Close()
	})
	return p
}

func adminCall(t *testing.T, p *process, method, path, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, p.admin.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+writeToken)
	resp, err := p.admin.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func fleetPolicy(limit int, version int64) string {
	v := ""
	if version > 0 {
		v = fmt.Sprintf(`"version":%d,`, version)
	}
	return fmt.Sprintf(`{"name":"api","algorithm":"fixedwindow","fixedwindow":{"limit":%d,"window":"1s"},"key":"global",%s"apps":["web"]}`, limit, v)
}

// waitApplied waits until each process applies version of policy name and
// returns how long each took from start.
func waitApplied(t *testing.T, ps []*process, name string, version int64, start time.Time) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := start.Add(5 * time.Second); ; {
				if q, ok := p.reg.Policy(name); ok && q.Version >= version {
					took[i] = time.Since(start)
					return
				}
				if time.Now().After(deadline) {
					took[i] = -1
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	return took
}

// Three processes share a Redis store: an update through one's admin API
// reaches all three within 100ms, and while it spreads their combined
// admissions never exceed the larger limit in any window.
func TestFleetUpdate(t *testing.T) {
	addr := redistest.Standalone(t)
	prefix := "test:" + t.Name() + ":"
	ps := []*process{startProcess(t, addr, prefix, 0), startProcess(t, addr, prefix, 0), startProcess(t, addr, prefix, 0)}
	const before, after = 40, 80

	start := time.Now()
	if code := adminCall(t, ps[0], "POST", "/policies", fleetPolicy(before, 0)); code != 201 {
		t.Fatalf("create: %d", code)
	}
	for i, d := range waitApplied(t, ps, "api", 1, start) {
		if d < 0 {
			t.Fatalf("process %d never saw the policy", i)
		}
	}

	// Every process asks for permits as fast as it can; each grant is
	// recorded with the instants before and after the call.
	type grant struct{ from, to time.Time }
	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range ps {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for {
					select {
					case <-stop:
						return
					default:
					}
					from := time.Now()
					l, err := p.reg.Acquire(ctx, "api", "", "web", 1)
					to := time.Now()
					if err != nil {
						t.Error(err)
						return
					}
					if l.Acquired() {
						mu.Lock()
						grants = append(grants, grant{from, to})
						mu.Unlock()
					}
					// A refusal is cached locally: without a pause a
					// refused caller would spin on the (shared) cores.
					time.Sleep(500 * time.Microsecond)
				}
			}()
		}
	}

	time.Sleep(1500 * time.Millisecond)
	changeAt := time.Now()
	var took []time.Duration
	applying := make(chan struct{})
	go func() {
		defer close(applying)
		took = waitApplied(t, ps, "api", 2, changeAt)
	}()
	if code := adminCall(t, ps[0], "PUT", "/policies/api", fleetPolicy(after, 1)); code != 200 {
		t.Fatalf("update: %d", code)
	}
	answered := time.Since(changeAt)
	<-applying
	t.Logf("propagation of an update through process 0's admin API, from the request: applied by processes 0, 1, 2 after %v (the API answered after %v)", took, answered)
	for i, d := range took {
		if d < 0 || d > 100*time.Millisecond {
			t.Errorf("process %d applied the update after %v, want within 100ms", i, d)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()

	// Count the grants of each window (1s, aligned to the epoch) whose call
	// lay within it; a grant whose call straddled an edge is left out.
	perWindow := map[int64]int{}
	straddled := 0
	for _, g := range grants {
		w := g.from.UnixNano() / int64(time.Second)
		if g.to.UnixNano()/int64(time.Second) != w {
			straddled++
			continue
		}
		perWindow[w]++
	}
	var windows []int64
	for w := range perWindow {
		windows = append(windows, w)
	}
	slices.Sort(windows)
	changeWindow := changeAt.UnixNano() / int64(time.Second)
	sawNew := false
	if len(windows) < 4 {
		t.Fatalf("grants in %d windows only", len(windows))
	}
	for _, w := range windows[1 : len(windows)-1] { // whole windows only
		n := perWindow[w]
		t.Logf("window %d: %d grants", w-changeWindow, n)
		if n > after {
			t.Errorf("window %d: %d grants, over the larger limit %d", w-changeWindow, n, after)
		}
		if w < changeWindow && n > before {
			t.Errorf("window %d before the change: %d grants, over %d", w-changeWindow, n, before)
		}
		sawNew = sawNew || (w > changeWindow && n > before)
	}
	if !sawNew {
		t.Errorf("no window after the change admitted more than the old limit %d", before)
	}
	t.Logf("%d grants, %d straddling a window edge", len(grants), straddled)

	// A process started after the change starts with it.
	late := startProcess(t, addr, prefix, 0)
	if p, ok := late.reg.Policy("api"); !ok || p.Version != 2 || p.Config != ps[0].reg.policyConfig("api") {
		t.Fatalf("a process started after the change has %+v", p)
	}
}

func (r *Registry) policyConfig(name string) any {
	p, _ := r.Policy(name)
	return p.Config
}

// Two processes edit one policy from the same version at once: one wins,
// the other gets 409; edits of two policies are both kept.
func TestFleetConcurrentEdits(t *testing.T) {
	addr := redistest.Standalone(t)
	prefix := "test:" + t.Name() + ":"
	a, b := startProcess(t, addr, prefix, 0), startProcess(t, addr, prefix, 0)
	if code := adminCall(t, a, "POST", "/policies", fleetPolicy(10, 0)); code != 201 {
		t.Fatalf("create: %d", code)
	}
	other := strings.Replace(fleetPolicy(10, 0), `"api"`, `"search"`, 1)
	if code := adminCall(t, a, "POST", "/policies", other); code != 201 {
		t.Fatalf("create: %d", code)
	}
	for round := range 20 {
		v := int64(1 + round)
		codes := make([]int, 2)
		var wg sync.WaitGroup
		for i, p := range []*process{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = adminCall(t, p, "PUT", "/policies/api", fleetPolicy(20+i+2*round, v))
			}()
		}
		wg.Wait()
		slices.Sort(codes)
		if codes[0] != 200 || codes[1] != 409 {
			t.Fatalf("round %d: two edits of version %d got %v, want one 200 and one 409", round, v, codes)
		}
	}
	// Different policies, at once: both kept.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, p := range []*process{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				codes[i] = adminCall(t, p, "PUT", "/policies/api", fleetPolicy(99, 21))
			} else {
				codes[i] = adminCall(t, p, "PUT", "/policies/search", strings.Replace(fleetPolicy(77, 1), `"api"`, `"search"`, 1))
			}
		}()
	}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("edits of two policies: %v", codes)
	}
	for _, p := range []*process{a, b} {
		waitApplied(t, []*process{p}, "search", 2, time.Now())
		waitApplied(t, []*process{p}, "api", 22, time.Now())
		api, _ := p.reg.Policy("api")
		search, _ := p.reg.Policy("search")
		if api.Version != 22 || search.Version != 2 || !strings.Contains(fmt.Sprint(api.Config), "99") || !strings.Contains(fmt.Sprint(search.Config), "77") {
			t.Fatalf("after two edits: %+v %+v", api, search)
		}
	}
}

// A change made while a process's subscription is cut reaches it when it
// subscribes again, without the periodic reload.
func TestFleetReconnect(t *testing.T) {
	addr := redistest.Standalone(t)
	prefix := "test:" + t.Name() + ":"
	a, b := startProcess(t, addr, prefix, -1), startProcess(t, addr, prefix, -1)
	if code := adminCall(t, a, "POST", "/policies", fleetPolicy(10, 0)); code != 201 {
		t.Fatalf("create: %d", code)
	}
	waitApplied(t, []*process{b}, "api", 1, time.Now())
	ctx := context.Background()
	// Cut every subscriber's connection, and change the policy at once.
	if err := a.client.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	cur, _ := a.store.Get(ctx, "api")
	cur.Config = mustDecode(t, fleetPolicy(30, 0)).Config
	if _, err := a.store.Update(ctx, cur, "x"); err != nil {
		t.Fatal(err)
	}
	took := waitApplied(t, []*process{a, b}, "api", 2, time.Now())
	t.Logf("after a cut subscription: applied in %v", took)
	for i, d := range took {
		if d < 0 {
			t.Fatalf("process %d never saw the change made while its subscription was cut", i)
		}
	}
}

func mustDecode(t *testing.T, s string) Policy {
	t.Helper()
	p, err := Decode(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
