# nodekit — the two commands a newcomer needs:
#   make run    set up the machine, start the local node environment and run the agent
#   make test   set up the machine and run every test (unit + integration)
# and the one a change must pass before review:
#   make lint   golangci-lint with the house rules (.golangci.yml)
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
GO ?= go
# Integration tests fail instead of skipping when their binaries are missing.
export NODEKIT_REQUIRE_INTEGRATION ?= 1
export NODEKIT_BIN_DIR ?= $(CURDIR)/_output/bin
TEST_FLAGS ?= -timeout 45m

.PHONY: all deps tools build vet lint test test-unit run up down clean

all: build

deps:
	bash hack/install-deps.sh

tools: deps
	bash hack/build-tools.sh

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...

# golangci-lint (the version hack/tools-lint pins) over the module, with the
# house rules of .golangci.yml. hack/build-lint.sh builds it once into
# _output/bin, or copies it from /var/cache/nodekit; LINT_FLAGS passes more
# flags (e.g. LINT_FLAGS=--fix).
GOLANGCI_LINT = $(CURDIR)/_output/bin/golangci-lint
LINT_FLAGS ?=
lint:
	bash hack/build-lint.sh
	$(GOLANGCI_LINT) run $(LINT_FLAGS) ./...

# The packages whose tests start a containerd (internal/localcri and every
# user of agenttest.StartContainerd): the runtime-facing tests, run a second
# time on containerd 2.
CONTAINERD_PKGS = ./internal/localcri $(shell grep -rl --include='*_test.go' --exclude-dir=_output \
	-e 'StartContainerd' . | xargs -n1 dirname | sort -u)

# Every test, including those against a real kube-apiserver and containerd,
# on Debian's containerd 1.6; then the runtime-facing tests again on
# containerd 2 (NODEKIT_CONTAINERD=2, the binaries `make tools` builds into
# _output/bin/containerd2). Each pass starts with the environment smoke
# tests run verbosely, so the log shows a real kube-apiserver answering
# /readyz, which containerd the pass runs ("containerd is ready" with its
# CRI version) and criruntime running a sandbox and a busybox container on it.
# Tests that pin their containerd in code run once, in their runtime's pass
# (running them in the other pass would repeat the same run). So do the
# tests of the agent's own logic for which the runtime only runs the pods
# (ONCE, in the containerd 1.6 pass): CSI volumes other than block devices
# (mounted by the agent, bind-mounted by either runtime alike), the API
# server outage, the node API's settings, pod resources, tracing, logging,
# metrics paths, sd_notify and service links. The runtime-facing tests of
# fullagent (pulls, probes, cgroups, restarts and takeover, block devices,
# resize, ...) run in both passes.
PINNED_16 = TestPodSecurity|TestSecurityPodsSideBySide|TestImageVolumeContainerd16|TestSystemdCgroupDriverContainerd16
PINNED_2 = TestPodSecurityContainerd2|TestUserPodsSideBySide|TestImageVolumeIntegration|TestDRAEndToEnd|TestDRADeviceHealth|TestSystemdCgroupDriverPods|TestSystemdCgroupDriverQOSReserved
ONCE = TestCSIVolumes|TestCSIVolumesSideBySide|TestCSIRestartSideBySide|TestCSIAttach|TestCSIAttachSideBySide|TestCSIVolumeStats|TestAPIServerOutage|TestConfigKubeadmNode|TestPodResourcesAPI|TestTracing|TestLoggingJSON|TestLoggingSplitStream|TestMetricsMove|TestNodeAPISettings|TestNodeAPIDisabled|TestAgentNotifiesSystemd|TestServiceLinks

test: tools vet
	$(GO) test -count=1 -v -run '^(TestControlPlane|TestContainerdIntegration)$$' ./agenttest ./criruntime 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|readyz|sandbox|SIGTERM|containerd is ready'
	$(GO) test $(TEST_FLAGS) -skip '^($(PINNED_2))$$' ./...
	NODEKIT_CONTAINERD=2 $(GO) test -count=1 -v -run '^TestContainerdIntegration$$' ./criruntime 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|sandbox|SIGTERM|containerd is ready'
	NODEKIT_CONTAINERD=2 $(GO) test $(TEST_FLAGS) -skip '^($(PINNED_16)|$(ONCE))$$' $(CONTAINERD_PKGS)

# Unit tests only: no root, no binaries; integration tests skip.
test-unit:
	NODEKIT_REQUIRE_INTEGRATION= NODEKIT_BIN_DIR=/nonexistent $(GO) test -short ./...

up: tools
	bash hack/local-up.sh

down:
	bash hack/local-down.sh

run: up
	bash hack/run-agent.sh --background
	$(GO) run ./hack/localenv demo --node $${NODE:-nodekit-node}

clean: down
	rm -rf _output/local
