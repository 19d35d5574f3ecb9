module github.com/limitkit/ratelimit/cmd/limitkit

go 1.25

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/chromedp/cdproto v0.159.2
	github.com/chromedp/chromedp v0.23.0
	github.com/limitkit/ratelimit v0.0.0
	github.com/redis/go-redis/v9 v9.17.3
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/time v0.10.0 // indirect
)

replace github.com/limitkit/ratelimit => ../..
