// Package itest holds the one rule every nodekit integration test follows
// when what it needs is not there: skip, or fail when
// $NODEKIT_REQUIRE_INTEGRATION is set, so CI never skips silently; and
// under `go test -short` (make test-unit) start no process at all.
//
// It has no dependencies so that every package's tests can use it, even
// those below agenttest (internal/localcp, internal/localcri, topology).
// agenttest.RequireIntegration is the public face of Require.
package itest
