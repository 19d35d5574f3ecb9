# limitkit/ratelimit. `make test` is what CI runs (.ci/run); `make bench` is
# the algorithm comparison.
GO ?= go

.PHONY: test bench gobench lint cover

test:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 ./...

# Until the bench program exists, the Go benchmarks against x/time/rate.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 ./memory/

lint:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@2025.1.1 ./...

cover:
	$(GO) test -race -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1
