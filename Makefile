# knbox: `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Go from PATH, else where the machines have it.
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/knbox/knbox/pkg/version.Version=$(VERSION)

# Tests on a 2-core machine: two packages at a time, two parallel tests in
# each. Override with e.g. `make test TEST_P=1 TEST_PARALLEL=1`.
TEST_P ?= 2
TEST_PARALLEL ?= 2
TEST_TIMEOUT ?= 60m
TESTFLAGS ?=

# staticcheck 2026.2.2, which knows go1.26.
STATICCHECK_VERSION ?= v0.8.2

DATA_DIR ?= /var/lib/knbox
# Extra flags of `make run`'s knbox serve (knbox serve --help).
SERVE_FLAGS ?=
FUZZTIME ?= 20s

.PHONY: help
help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z_-]+:.*## / { printf "  %-8s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo "  variables: DATA_DIR=$(DATA_DIR) SERVE_FLAGS=$(SERVE_FLAGS) FUZZTIME=$(FUZZTIME) TEST_P=$(TEST_P) TEST_PARALLEL=$(TEST_PARALLEL)"

.PHONY: deps
deps: ## install the commands the tests need (kubectl, runc, ...; root on Debian 12)
	hack/install-deps.sh

.PHONY: build
build: ## build bin/knbox
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/knbox ./cmd/knbox

.PHONY: test
test: deps ## install deps, then run every test with the race detector
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -p $(TEST_P) -parallel $(TEST_PARALLEL) $(TESTFLAGS) ./...

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, and go.mod/go.sum tidy
	@files=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [[ -n "$$files" ]]; then echo "gofmt -l: not formatted:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

.PHONY: bench
bench: ## install wrk and nginx if missing, run the benchmarks: go test -bench, then the tables of bench/
	BENCH=1 hack/install-deps.sh
	$(GO) test -run=NONE -bench=. -benchmem -p 1 ./...
	$(GO) run ./bench/api
	$(GO) run ./bench/instance
	$(GO) run ./bench/dataplane

.PHONY: fuzz
fuzz: ## run every fuzz target (found with go test -list) for FUZZTIME each
	@$(GO) test -list '^Fuzz' ./... \
	| awk '/^Fuzz/ { t[n++] = $$1; next } /^ok / { for (i = 0; i < n; i++) print $$2, t[i] } { n = 0 }' \
	| while read -r pkg target; do \
		echo "== $$pkg $$target ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) "$$pkg" </dev/null || exit 1; \
	done

.PHONY: run
run: deps build ## build, then run `knbox serve` with DATA_DIR and load the offline sample image
	$(GO) run ./hack/sampleimage -o _output/helloworld.tar
	@echo "knbox is starting with data in $(DATA_DIR). From another shell:"
	@echo "  bin/knbox kubeconfig --data-dir $(DATA_DIR) -o ~/.kube/knbox.yaml"
	@echo "  export KUBECONFIG=~/.kube/knbox.yaml"
	@echo "  kubectl apply -f examples/hello.yaml"
	@echo "  curl http://hello.default.localhost:8080"
	@bin/knbox serve --data-dir $(DATA_DIR) $(SERVE_FLAGS) & pid=$$!; \
	trap 'kill -TERM $$pid 2>/dev/null; wait $$pid; exit 0' INT TERM; \
	for i in $$(seq 1 120); do \
		KUBECONFIG= KNBOX_DATA_DIR=$(DATA_DIR) bin/knbox image load _output/helloworld.tar >/dev/null 2>&1 && break; \
		kill -0 $$pid 2>/dev/null || break; sleep 1; \
	done; \
	echo "the sample image knbox.local/samples/helloworld-go:latest is loaded (examples/hello.yaml runs it)"; \
	wait $$pid

.PHONY: clean
clean: ## remove build outputs
	rm -rf bin/ _output/
