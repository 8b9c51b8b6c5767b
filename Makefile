# The README's commands. `make test` is what CI runs (.ci/run).
GO       ?= go
VENV     := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: run build deps test ci fmt-check vet unit istio e2e bench clean

## run: the service on its embedded default (in-memory store, example config); no Redis needed
run:
	$(GO) run ./cmd/ext-authz

## build: binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## deps: install what the tests need (redis-server, the e2e virtualenv with Envoy and the SDKs)
deps:
	./scripts/deps.sh

## test: the whole suite: format, vet, unit and integration tests (race detector), e2e
test: deps fmt-check vet unit istio e2e

ci: test

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

## istio: render every kustomize overlay and validate it strictly (a module of its own: istio/go.mod)
istio:
	cd istio && ./test.sh

e2e:
	@if [ -f e2e/run.sh ]; then ./e2e/run.sh; else echo "e2e: no suite yet"; fi

## bench: the Go benchmarks (figures go to docs/performance.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin e2e/report
