package containermetrics

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ulimit is one soft limit of a cgroup's root process, by cadvisor's
// name for it.
type ulimit struct {
	name string
	soft int64
}

// rootPid is the process whose limits a cgroup's container_ulimits_soft
// reports: pid 1 for the root cgroup (as cadvisor's raw handler), and
// for a runtime's container or sandbox the lowest pid in the cgroup
// (cadvisor asks containerd for the task's pid, its init, which is the
// first of the container's processes); 0 for other cgroups, which
// cadvisor reports no ulimits for.
func rootPid(cgroup string, id identity, procs []int) int {
	switch {
	case cgroup == "/":
		return 1
	case id.name == "" || len(procs) == 0:
		return 0
	}
	return slices.Min(procs)
}

// readUlimits reads /proc/PID/limits as cadvisor does: only the
// "Max open files" line, as max_open_files; "unlimited" is -1. An
// unreadable file (the process exited) or line gives none.
func readUlimits(procDir string, pid int) []ulimit {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "limits"))
	if err != nil {
		return nil
	}
	const prefix = "Max open files"
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // soft, hard, units
		if len(fields) != 3 {
			return nil
		}
		soft, ok := parseLimit(fields[0])
		if _, hardOK := parseLimit(fields[1]); !ok || !hardOK {
			return nil
		}
		return []ulimit{{name: "max_open_files", soft: soft}}
	}
	return nil
}

func parseLimit(s string) (int64, bool) {
	if strings.EqualFold(s, "unlimited") {
		return -1, true
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// ulimitSeries is cadvisor's container_ulimits_soft (ProcessMetrics).
var ulimitSeries = []series{
	{name: "container_ulimits_soft", help: "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice",
		extra: []string{"ulimit"},
		values: func(s *cgroupStats) []sample {
			v := make([]sample, 0, len(s.ulimits))
			for _, u := range s.ulimits {
				v = append(v, sample{v: float64(u.soft), labels: []string{u.name}})
			}
			return v
		}},
}
