package agenttest

import (
	"os"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// UnmountBelowOnCleanup registers a cleanup that detaches every mount
// below dir, deepest first. An agent under test that is stopped leaves its
// pods' volumes mounted (as it should: a restarted agent adopts them), so
// without this t.TempDir's removal fails with "device or resource busy".
// Register it after t.TempDir (cleanups run in reverse) and before the
// cleanup that stops the agent.
func UnmountBelowOnCleanup(t testing.TB, dir string) {
	t.Cleanup(func() {
		b, err := os.ReadFile("/proc/self/mounts")
		if err != nil {
			return
		}
		var below []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				below = append(below, f[1])
			}
		}
		sort.Slice(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
		for _, m := range below {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				t.Logf("agenttest: unmount %s: %v", m, err)
			}
		}
	})
}
