//go:build tools

// Package tools pins the runc that hack/build-tools.sh builds into
// _output/bin/containerd2 for containerd 2 (Debian's runc 1.1.5 has no
// user-namespace support). A module of its own so that containerd's
// dependency versions do not change runc's. It is never imported.
package tools

import (
	_ "github.com/opencontainers/runc"
)
