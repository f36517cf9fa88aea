package cgroupmgr

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MaxPIDs is the node's "pid" capacity (ResourcePID), as upstream's
// pidlimit.Stats reads it: the smaller of kernel.pid_max and
// kernel.threads-max under procSys (normally /proc/sys; both are
// system-wide limits on tasks). With "pods" enforced, kubepods' pids.max
// (TasksMax) is that less the pid reservations.
func MaxPIDs(procSys string) (int64, error) {
	limit := int64(-1)
	for _, name := range []string{"kernel/pid_max", "kernel/threads-max"} {
		b, err := os.ReadFile(filepath.Join(procSys, name))
		if err != nil {
			return 0, fmt.Errorf("cgroupmgr: %w", err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cgroupmgr: %s: %w", filepath.Join(procSys, name), err)
		}
		if limit < 0 || v < limit {
			limit = v
		}
	}
	return limit, nil
}
