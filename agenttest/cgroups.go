package agenttest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/nodekit/nodekit/internal/cgroot"
	"github.com/nodekit/nodekit/internal/itest"
)

// CgroupRoot creates a cgroup of the test's own, /nodekit-test-<random>, in
// every cgroup hierarchy, for an agent's cgroupRoot: its kubepods tree
// then cannot touch another agent's pods on the same machine. Cleanup
// kills whatever is left in it and removes it. Without root or writable
// cgroups the test is skipped (or fails with $NODEKIT_REQUIRE_INTEGRATION).
func CgroupRoot(t testing.TB) string {
	t.Helper()
	itest.Short(t, "cgroups")
	if os.Geteuid() != 0 {
		RequireIntegration(t, "cgroups", fmt.Errorf("writing cgroups needs root"))
	}
	r, err := cgroot.Create(fmt.Sprintf("nodekit-test-%08x", rand.Uint32()))
	if err != nil {
		RequireIntegration(t, "cgroups", err)
	}
	t.Cleanup(func() {
		if err := r.Remove(); err != nil {
			t.Errorf("remove cgroup root %s: %v", r.Name, err)
		}
	})
	return r.Name
}
