package agenttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildCredentialProvider builds the test credential provider plugin
// (agenttest/credprovtest) as dir/name with the go command on $PATH and returns its path. The test fails if the build
// does. It runs no plugin.
func BuildCredentialProvider(t testing.TB, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, "github.com/nodekit/nodekit/agenttest/credprovtest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the credential provider plugin: %v\n%s", err, b)
	}
	return out
}
