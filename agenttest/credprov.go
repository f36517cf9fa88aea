package agenttest

import (
	"testing"
)

// BuildCredentialProvider builds the test credential provider plugin
// (agenttest/credprovtest) as dir/name with the go command on $PATH and returns its path. The test fails if the build
// does. It runs no plugin.
func BuildCredentialProvider(t testing.TB, dir, name string) string {
	t.Helper()
	out, err := BuildCommand(dir, "github.com/nodekit/nodekit/agenttest/credprovtest", name)
	if err != nil {
		t.Fatalf("build the credential provider plugin: %v", err)
	}
	return out
}
