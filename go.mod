module github.com/limitkit/ratelimit

go 1.22

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.10.0
)

require github.com/stretchr/testify v1.12.1 // indirect
