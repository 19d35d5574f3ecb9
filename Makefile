# limitkit/ratelimit. `make test` is what CI runs (.ci/run); `make bench` is
# the algorithm comparison.
GO ?= go

.PHONY: test vet test-redis test-others test-bench test-grpc test-otel test-server serve bench gobench lint cover

# The suites run side by side, three at a time, each printing a line per
# package as the package finishes: the redis package first (the longest,
# waiting on servers more than on the processors), the checks (vet of every
# module, gofmt) beside it, then the library's other packages, the bench
# module, and the grpclimit, otel and server (cmd/limitkit) modules. make -k
# lets every suite finish and fails if any failed.
test:
	@$(MAKE) --no-print-directory -k -j3 test-redis vet test-others test-bench test-grpc test-otel test-server

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd grpclimit && $(GO) vet ./...
	cd otel && $(GO) vet ./...
	cd cmd/limitkit && $(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

test-redis:
	$(GO) test -race -count=1 ./redis/

test-others:
	pkgs=$$($(GO) list ./...) || exit 1; $(GO) test -race -count=1 $$(echo "$$pkgs" | grep -v '/redis$$')

test-bench:
	cd bench && $(GO) test -race -count=1 ./...

test-grpc:
	cd grpclimit && $(GO) test -race -count=1 ./...

test-otel:
	cd otel && $(GO) test -race -count=1 ./...

test-server:
	cd cmd/limitkit && $(GO) test -race -count=1 ./...

# The limitkit server: the demo at http://127.0.0.1:8080/, management at /admin.
serve:
	cd cmd/limitkit && $(GO) run . $(ARGS)

# The algorithm comparison: a markdown report on stdout, bench/report.html.
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
	cd grpclimit && $(GO) vet ./...
	cd grpclimit && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd otel && $(GO) vet ./...
	cd otel && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd cmd/limitkit && $(GO) vet ./...
	cd cmd/limitkit && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

cover:
	$(GO) test -race -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1
