package agenttest

import (
	"testing"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// UnmountBelowOnCleanup registers a cleanup that detaches every mount
// at or below dir, deepest first (fsutil.UnmountBelow). An agent under test that is stopped leaves its
// pods' volumes mounted (as it should: a restarted agent adopts them), so
// without this t.TempDir's removal fails with "device or resource busy".
// Register it after t.TempDir (cleanups run in reverse) and before the
// cleanup that stops the agent.
func UnmountBelowOnCleanup(t testing.TB, dir string) {
	t.Cleanup(func() {
		if _, err := fsutil.UnmountBelow(dir); err != nil {
			t.Logf("agenttest: %v", err)
		}
	})
}
