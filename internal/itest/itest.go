package itest

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// RequireEnv, when set to anything non-empty, turns a missing integration
// dependency from a skip into a failure.
const RequireEnv = "NODEKIT_REQUIRE_INTEGRATION"

// ErrShort is the reason Short gives: unit-test mode starts no process.
var ErrShort = errors.New("-short (unit tests) starts no process")

// Required reports whether $NODEKIT_REQUIRE_INTEGRATION is set.
func Required() bool { return os.Getenv(RequireEnv) != "" }

// Require stops a test that cannot run because what is not available;
// missing says what is absent. Without $NODEKIT_REQUIRE_INTEGRATION the
// test is skipped, with it the test fails. A nil missing does nothing.
//
// Call it only when the dependency is truly absent (not installed, not
// built, not this kind of machine); one that is there but fails to start
// is a test failure.
func Require(t testing.TB, what string, missing error) {
	t.Helper()
	if missing == nil {
		return
	}
	if Required() {
		t.Fatalf("%s is required ($%s is set) but not available: %v", what, RequireEnv, missing)
		return
	}
	hint := "; run `make tools` to install or build it"
	if strings.Contains(missing.Error(), "make tools") || errors.Is(missing, ErrShort) {
		hint = ""
	}
	t.Skipf("skipping: %s not available: %v%s (set %s=1 to fail instead of skipping)",
		what, missing, hint, RequireEnv)
}

// Short stops a test that would start a process (containerd, etcd,
// kube-apiserver, the agent) when it runs under -short, as Require does.
func Short(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		Require(t, what, ErrShort)
	}
}
