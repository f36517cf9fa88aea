package cgroupmgr

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// checkPodUnitV2 checks a pod slice's unit properties on cgroup v2
// against tc: MemoryMax, CPUWeight, CPUQuotaPerSecUSec, TasksMax, and
// that systemd delegated the controllers kubelet sizes to the slice.
func checkPodUnitV2(t *testing.T, conn *sddbus.Conn, tc podCase) {
	t.Helper()
	memory := systemdInfinity
	if tc.memory != "" {
		memory = parseUint(tc.memory)
	}
	for name, want := range map[string]any{
		"MemoryMax":          memory,
		"CPUWeight":          parseUint(tc.weight),
		"CPUQuotaPerSecUSec": tc.quotaPerSec,
		"TasksMax":           uint64(100),
	} {
		if got := unitProp(t, conn, tc.tasksUnit, name); got != want {
			t.Errorf("systemd's %s of %s is %v, want %v", name, tc.tasksUnit, got, want)
		}
	}
}

// checkPodFilesV2 reads the pods' slices' cgroup v2 files: cpu.weight,
// cpu.max, memory.max and pids.max as kubelet's systemd driver leaves
// them, and the controllers enabled for what runs below.
func checkPodFilesV2(t *testing.T, cases []podCase, host func(string) string) {
	t.Helper()
	for _, tc := range cases {
		dir := filepath.Join(defaultRoot, host(tc.parent))
		memory := tc.memory
		if memory == "" {
			memory = "max"
		}
		for file, want := range map[string]string{
			"cpu.weight": tc.weight, "cpu.max": tc.cpuMax, "memory.max": memory, "pids.max": "100",
		} {
			if got := readT(t, filepath.Join(dir, file)); got != want {
				t.Errorf("%s %s is %s, want %s", tc.parent, file, got, want)
			}
		}
		ctl := readT(t, filepath.Join(dir, "cgroup.controllers"))
		for _, c := range []string{"cpu", "memory", "pids"} {
			if !slices.Contains(strings.Fields(ctl), c) {
				t.Errorf("%s has controllers %q, lacking %s", tc.parent, ctl, c)
			}
		}
	}
}

func parseUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}
