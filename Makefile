# limitkit/ratelimit. `make test` is what CI runs (.ci/run); `make bench` is
# the algorithm comparison.
GO ?= go

.PHONY: test bench gobench lint cover

test:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 ./...
	cd bench && $(GO) test -race -count=1 ./...

# The algorithm comparison: a markdown table on stdout, bench/report.html.
bench:
	cd bench && $(GO) run . -out report.html

# The Go benchmarks: ours against x/time/rate (memory) and against the peer
# libraries (bench module; see bench/README.md).
gobench:
	$(GO) test -run '^$$' -bench . -benchmem ./memory/
	cd bench && $(GO) test -run '^$$' -bench . -benchmem .

lint:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd bench && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

cover:
	$(GO) test -race -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1
