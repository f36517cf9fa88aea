package agenttest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/agenttest"
)

const shortChildEnv = "NODEKIT_SHORT_CHILD"

// TestShortStartsNothing runs this package's test binary again as
// `make test-unit` does (-short, $NODEKIT_REQUIRE_INTEGRATION empty) and
// checks that StartContainerd, StartControlPlane, StartRegistry and CgroupRoot skip
// there without starting a process, even as root.
func TestShortStartsNothing(t *testing.T) {
	agenttest.SkipShort(t, "a second test process")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.short", "-test.v", "-test.run=^TestShortChild$")
	cmd.Env = append(os.Environ(), shortChildEnv+"=1", agenttest.RequireIntegrationEnv+"=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("short child: %v\n%s", err, out)
	}
	for _, want := range []string{"--- SKIP: TestShortChild/containerd", "--- SKIP: TestShortChild/controlplane",
		"--- SKIP: TestShortChild/cgroups", "--- SKIP: TestShortChild/registry", "--- PASS: TestShortChild", "starts no process"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("short child output lacks %q:\n%s", want, out)
		}
	}
}

// TestShortChild is the child of TestShortStartsNothing; alone it does
// nothing.
func TestShortChild(t *testing.T) {
	if os.Getenv(shortChildEnv) == "" {
		return
	}
	t.Run("containerd", func(t *testing.T) { agenttest.StartContainerd(t) })
	t.Run("controlplane", func(t *testing.T) { agenttest.StartControlPlane(t) })
	t.Run("cgroups", func(t *testing.T) { agenttest.CgroupRoot(t) })
	t.Run("registry", func(t *testing.T) { agenttest.StartRegistry(t) })
	if kids := children(t); len(kids) != 0 {
		t.Errorf("under -short the starters left child processes %v", kids)
	}
}

// children lists the pids of this process's children (from every thread).
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids
}
