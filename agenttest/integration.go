package agenttest

import (
	"os"
	"strings"
	"testing"
)

// RequireIntegrationEnv, when set to anything non-empty, turns a missing
// integration dependency (binaries of the control plane, containerd, ...)
// from a skip into a failure. CI sets it, so CI never skips silently.
const RequireIntegrationEnv = "NODEKIT_REQUIRE_INTEGRATION"

// RequireIntegration stops a test that cannot run because what (for example
// "local control plane (etcd + kube-apiserver)") is not available: missing
// says what is absent. With $NODEKIT_REQUIRE_INTEGRATION unset or empty the
// test is skipped; with it set the test fails. A nil missing does nothing.
//
// Call it only when the dependency is truly absent (not installed, not
// built); a dependency that is there but fails to start is a test failure.
func RequireIntegration(t testing.TB, what string, missing error) {
	t.Helper()
	if missing == nil {
		return
	}
	if os.Getenv(RequireIntegrationEnv) != "" {
		t.Fatalf("%s is required ($%s is set) but not available: %v", what, RequireIntegrationEnv, missing)
	}
	hint := "; run `make tools` to install or build it"
	if strings.Contains(missing.Error(), "make tools") {
		hint = ""
	}
	t.Skipf("skipping: %s not available: %v%s (set %s=1 to fail instead of skipping)",
		what, missing, hint, RequireIntegrationEnv)
}
