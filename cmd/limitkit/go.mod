module github.com/limitkit/ratelimit/cmd/limitkit

go 1.25

require (
	github.com/limitkit/ratelimit v0.0.0
	github.com/redis/go-redis/v9 v9.17.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	golang.org/x/time v0.10.0 // indirect
)

replace github.com/limitkit/ratelimit => ../..
