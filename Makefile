# The README's commands. `make test` is what CI runs (.ci/run).
GO       ?= go
VENV     := .venv
LINT     := $(CURDIR)/.tools/bin/golangci-lint
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: run build deps test ci fmt-check vet lint tidy-check unit alerts fuzz-smoke istio e2e bench loadgen fuzz soak faults compose clean

## run: the service on its embedded default (in-memory store, example config); no Redis needed
run:
	$(GO) run ./cmd/ext-authz

## build: binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## deps: install what the tests need (golangci-lint, redis-server, the e2e virtualenv with Envoy and the SDKs, Docker)
deps:
	./scripts/deps.sh

## test: the whole suite: format, vet, lint, tidy go.mod, unit and integration tests (race detector), alert rules, short fuzzing, e2e
test: deps fmt-check vet lint tidy-check unit alerts fuzz-smoke istio e2e compose

ci: test

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## lint: golangci-lint (the version pinned in scripts/deps.sh, .golangci.yml) on both modules
lint:
	./scripts/deps.sh lint
	$(LINT) run ./...
	cd istio && $(LINT) run -c ../.golangci.yml ./...

## tidy-check: fails when `go mod tidy` would change go.mod or go.sum (both modules)
tidy-check:
	$(GO) mod tidy -diff
	cd istio && $(GO) mod tidy -diff

unit:
	$(GO) test -race -count=1 ./...
	@# The soak's memory bound, without the race detector's shadow memory in the RSS.
	$(GO) test -count=1 -run '^TestSoak$$' ./cmd/ext-authz/
	@# The tokenizer's generated tables measured again and compared with the checked-in ones,
	@# without the race detector, under which measuring uniform_table.go takes minutes.
	$(GO) test -count=1 -run 'Generated$$' ./internal/tiktoken/
	@# Every benchmark once, as a smoke test (no timing gates): they must keep running.
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

## alerts: the Prometheus alert rules checked and unit-tested by promtool (installed by scripts/deps.sh; missing, it fails)
alerts:
	./scripts/deps.sh promtool
	promtool check rules deploy/prometheus/alerts.yaml
	promtool test rules deploy/prometheus/alerts_test.yaml

## fuzz-smoke: every fuzz target for FUZZTIME (2s) each, past its seeds (scripts/fuzz-smoke.sh)
fuzz-smoke:
	GO=$(GO) ./scripts/fuzz-smoke.sh

## istio: render every kustomize overlay and validate it strictly (a module of its own: istio/go.mod)
istio:
	cd istio && ./test.sh

## e2e: the end-to-end suite through the real Envoy (e2e/README.md), all but the compose stack
e2e:
	./e2e/run.sh --ignore=e2e/test_compose.py

## compose: the shipped compose stack built and run by Docker (e2e/test_compose.py), after e2e
compose:
	@# The base-image stand-ins first, outside pytest's per-test timeout: on a new machine they take
	@# longer than any test may (mmdebstrap, BuildKit's frontend); cached by content after.
	./e2e/compose/standins.sh
	E2E_REPORT_DIR=$(CURDIR)/e2e/report/compose ./e2e/run.sh e2e/test_compose.py

## bench: the Go benchmarks (figures go to docs/performance.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## loadgen: drive Check at concurrency 64 against the two floors (see docs/performance.md)
loadgen:
	$(GO) run ./cmd/loadgen

## fuzz: the long FuzzCheck run (not in CI); FUZZTIME=30m by default
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzCheck -fuzztime $${FUZZTIME:-30m} -parallel 1 ./internal/filter/

## soak: the long soak (not in CI; make test runs a 2-minute one); SOAK=30m by default
soak:
	SOAK_DURATION=$${SOAK:-30m} $(GO) test -run '^TestSoak$$' -v -timeout 40m ./cmd/ext-authz/

## faults: the Redis fault-injection tests alone, verbose (their figures are in docs/operations.md)
faults:
	$(GO) test -v -count=1 -run 'Fault|LocalFallback' ./cmd/ext-authz/

clean:
	rm -rf bin e2e/report
