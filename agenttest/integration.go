package agenttest

import (
	"testing"

	"github.com/nodekit/nodekit/internal/itest"
)

// RequireIntegrationEnv, when set to anything non-empty, turns a missing
// integration dependency (binaries of the control plane, containerd, ...)
// from a skip into a failure. CI sets it, so CI never skips silently.
const RequireIntegrationEnv = itest.RequireEnv

// RequireIntegration stops a test that cannot run because what (for example
// "local control plane (etcd + kube-apiserver)") is not available: missing
// says what is absent. With $NODEKIT_REQUIRE_INTEGRATION unset or empty the
// test is skipped; with it set the test fails. A nil missing does nothing.
//
// Call it only when the dependency is truly absent (not installed, not
// built, not this kind of machine); a dependency that is there but fails
// to start is a test failure.
func RequireIntegration(t testing.TB, what string, missing error) {
	t.Helper()
	itest.Require(t, what, missing)
}

// SkipShort stops, under `go test -short`, a test that would start a
// process (the agent, a driver); as RequireIntegration, it fails instead
// when $NODEKIT_REQUIRE_INTEGRATION is set. StartContainerd,
// StartControlPlane and CgroupRoot call it themselves.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	itest.Short(t, what)
}
