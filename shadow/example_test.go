package shadow_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/shadow"
)

// A limit of 2 requests per hour runs in shadow mode in the HTTP
// middleware: every request is served, with no RateLimit headers (the limit
// is not enforced), and the third is reported as one the limit would
// refuse.
func ExampleNew() {
	limit, err := memory.New(fixedwindow.Config{Limit: 2, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	dryRun := shadow.New(limit, func(_ context.Context, r shadow.Refusal) {
		fmt.Println("would refuse:", r.Lease.Reason())
	})
	defer dryRun.Close() // closes limit too

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	middleware, err := httplimit.Middleware(partitioned.Global(dryRun), httplimit.Options{Window: time.Hour})
	if err != nil {
		panic(err)
	}
	handler := middleware(mux)
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d policy=%q\n", w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 policy=""
	// 200 policy=""
	// would refuse: limit reached
	// 200 policy=""
}
