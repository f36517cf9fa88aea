//go:build tools

// Package tools pins golangci-lint, built by hack/build-lint.sh into
// _output/bin for `make lint`. It is a module of its own so the linters'
// dependencies stay out of the library's go.mod and out of the upstream
// tools module. It is never imported.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
