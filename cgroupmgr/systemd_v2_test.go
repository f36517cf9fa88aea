package cgroupmgr

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"k8s.io/apimachinery/pkg/util/wait"
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

// checkOOMKilledV2 waits until the memory.events of cgroup literal count
// an OOM kill and its usage fell below what it held (held bytes), as the
// kernel leaves a cgroup v2 whose memory.max was written below its
// unreclaimable usage.
func checkOOMKilledV2(t *testing.T, ctx context.Context, conn *sddbus.Conn, literal string, held int64) {
	t.Helper()
	dir := filepath.Join(defaultRoot, literal)
	var events, current string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		events, current = readT(t, filepath.Join(dir, "memory.events")), readT(t, filepath.Join(dir, "memory.current"))
		return oomKills(events) > 0 && parseUint(current) < uint64(held), nil
	})
	if err != nil {
		t.Errorf("%s: no OOM kill after its limit went below its usage (%d bytes held): memory.current %s, memory.events:\n%s", literal, held, current, events)
		return
	}
	if r, _ := unitProp(t, conn, "kubepods-besteffort.slice", "MemoryMax").(uint64); r != uint64(32*mi) {
		t.Errorf("systemd's MemoryMax of kubepods-besteffort.slice is %d after the OOM kill, want 32Mi", r)
	}
	t.Logf("%s: usage %s after its limit went to 32Mi below the %d bytes it held; memory.events oom_kill %d", literal, current, held, oomKills(events))
}

// oomKills is the oom_kill count of a memory.events file's content.
func oomKills(events string) uint64 {
	for l := range strings.Lines(events) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(l), "oom_kill "); ok {
			return parseUint(n)
		}
	}
	return 0
}
