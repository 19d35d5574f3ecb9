package httplimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
)

// Two requests per client IP per hour on a server.
func ExampleMiddleware() {
	perIP, _ := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			return memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour})
		},
	})
	defer perIP.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	limit, err := httplimit.Middleware(perIP, httplimit.Options{Window: time.Hour})
	if err != nil {
		panic(err)
	}
	handler := limit(mux)

	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil) // RemoteAddr 192.0.2.1:1234
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "default";q=2;w=3600
	// 200 "default";q=2;w=3600
	// 429 "default";q=2;w=3600
}

// A client that stays under an upstream's limit of 2 requests per hour per host.
func ExampleTransport() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	perHost, _ := partitioned.New(partitioned.Config{
		New: func(string) (ratelimit.Limiter, error) {
			return memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour})
		},
	})
	defer perHost.Close()
	client := &http.Client{Transport: &httplimit.Transport{Limiter: perHost, FailFast: true}}

	for i := 0; i < 3; i++ {
		resp, err := client.Get(upstream.URL)
		if errors.Is(err, httplimit.ErrRateLimited) {
			fmt.Println("not sent: rate limited")
			continue
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 200
	// 200
	// not sent: rate limited
}
