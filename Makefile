# nodekit — the two commands a newcomer needs:
#   make run    set up the machine, start the local node environment and run the agent
#   make test   set up the machine and run every test (unit + integration)
SHELL := /bin/bash
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
test: tools vet
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
