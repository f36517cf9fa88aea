//go:build tools

// Package tools pins containerd v2, built by hack/build-tools.sh into
// _output/bin/containerd2 so tests can run the runtime-facing suites on
// containerd 2 beside Debian's 1.6. It is a module of its own because
// containerd's dependencies differ from k8s.io/kubernetes'. It is never
// imported.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
