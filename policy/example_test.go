package policy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/policy"
)

// A registry over a store: a policy's limit changes while it runs. Over
// Redis, the store is policy.NewRedisStore(client, policy.RedisOptions{})
// and the backend policy.Redis(client): every process then sees the change.
func ExampleRegistry() {
	ctx := context.Background()
	store := policy.NewMemoryStore()
	p, _ := store.Create(ctx, policy.Policy{
		Name:   "login",
		Config: fixedwindow.Config{Limit: 2, Window: time.Hour},
		Key:    "ip",
		Apps:   []string{"web"},
	}, "alice")
	reg, err := policy.NewRegistry(ctx, store, policy.Options{})
	if err != nil {
		panic(err)
	}
	defer reg.Close()

	try := func() {
		lease, err := reg.Acquire(ctx, "login", "192.0.2.1", "web", 1)
		fmt.Println(lease.Acquired(), err)
	}
	try()
	try()
	try()

	// Raise the limit to 3: the key's window keeps the 2 it has taken.
	p.Config = fixedwindow.Config{Limit: 3, Window: time.Hour}
	if _, err := store.Update(ctx, p, "bob"); err != nil { // p.Version is 1: compare-and-set
		panic(err)
	}
	reg.Reload(ctx) // the registry follows the store; this makes it now
	try()
	try()

	lease, _ := reg.Peek(ctx, "login", "192.0.2.1") // permits == 0: takes nothing
	fmt.Println("remaining", lease.Remaining(), "of", lease.Limit())

	_, err = reg.Acquire(ctx, "login", "192.0.2.1", "batch", 1)
	fmt.Println(errors.Is(err, policy.ErrForbidden))
	// Output:
	// true <nil>
	// true <nil>
	// false <nil>
	// true <nil>
	// false <nil>
	// remaining 0 of 3
	// true
}

// The admin API: a writer changes a policy, naming the version it read.
func ExampleNewAdmin() {
	ctx := context.Background()
	store := policy.NewMemoryStore()
	reg, _ := policy.NewRegistry(ctx, store, policy.Options{})
	defer reg.Close()
	admin, _ := policy.NewAdmin(reg, policy.AdminOptions{Token: "s3cret"})
	srv := httptest.NewServer(admin)
	defer srv.Close()

	call := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(method, path, resp.StatusCode)
	}
	call("POST", "/policies", `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":5,"burst":10},"key":"ip","apps":["web"]}`)
	call("PUT", "/policies/login", `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":1,"burst":5},"key":"ip","apps":["web"],"version":1}`)
	call("PUT", "/policies/login", `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":9,"burst":5},"key":"ip","apps":["web"],"version":1}`)
	call("PUT", "/policies/login", `{"name":"login","algorithm":"tokenbucket","tokenbucket":{"rate":-1,"burst":5},"key":"ip","apps":["web"],"version":2}`)
	p, _ := reg.Policy("login")
	fmt.Println(p.Version, p.Config)
	// Output:
	// POST /policies 201
	// PUT /policies/login 200
	// PUT /policies/login 409
	// PUT /policies/login 400
	// 2 {1 5 0s 0 {0 OldestFirst}}
}
