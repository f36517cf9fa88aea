# nodekit — the two commands a newcomer needs:
#   make run    set up the machine, start the local node environment and run the agent
#   make test   set up the machine and run every test (unit + integration)
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
GO ?= go
# Integration tests fail instead of skipping when their binaries are missing.
export NODEKIT_REQUIRE_INTEGRATION ?= 1
export NODEKIT_BIN_DIR ?= $(CURDIR)/_output/bin
TEST_FLAGS ?= -timeout 45m

.PHONY: all deps tools build vet test test-unit run up down clean

all: build

deps:
	bash hack/install-deps.sh

tools: deps
	bash hack/build-tools.sh

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...

# Every test, including those against a real kube-apiserver and containerd.
# The first line runs the environment smoke tests verbosely, so the log
# shows a real kube-apiserver answering /readyz and criruntime running a
# sandbox and a busybox container on the private containerd.
test: tools vet
	$(GO) test -count=1 -v -run '^(TestControlPlane|TestContainerdIntegration)$$' ./agenttest ./criruntime 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|readyz|sandbox|SIGTERM'
	$(GO) test $(TEST_FLAGS) ./...

# Unit tests only: no root, no binaries; integration tests skip.
test-unit:
	NODEKIT_REQUIRE_INTEGRATION= NODEKIT_BIN_DIR=/nonexistent $(GO) test -short ./...

up: tools
	bash hack/local-up.sh

down:
	bash hack/local-down.sh

run: up
	bash hack/run-agent.sh

clean: down
	rm -rf _output/local
