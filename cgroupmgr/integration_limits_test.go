package cgroupmgr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// guaranteedPodLimits has the cgroupfs driver make a Guaranteed pod's
// cgroup (250m CPU, 64Mi, podPidsLimit 100) and reads its files and
// ReadPodCgroup back, then removes it. The numbers are upstream kubelet
// v1.37.2's for that pod: ResourceConfigForPod gives 256 shares
// (250*1024/1000) and a quota of 25000us per 100000us; its cgroup v2
// manager writes getCPUWeight(256) = 1 + 254*9999/262142 = 10 to
// cpu.weight and reads it back as cpuWeightToCPUShares(10) =
// 9*262142/9999 + 2 = 237.
func guaranteedPodLimits(t *testing.T, ctx context.Context, m *Manager, v Version, root string) {
	t.Helper()
	pod := podWith(fmt.Sprintf("g%08x", rand.Uint32()), res(rl("cpu", "250m", "memory", "64Mi"), rl("cpu", "250m", "memory", "64Mi")))
	parent, err := m.EnsurePod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := root + "/kubepods/pod" + string(pod.UID); parent != want {
		t.Fatalf("Guaranteed cgroup parent %q, want %q", parent, want)
	}
	files := map[string][2]string{ // v1 file, v2 file, by controller
		"cpu":    {"cpu.shares", "cpu.weight"},
		"memory": {"memory.limit_in_bytes", "memory.max"},
		"pids":   {"pids.max", "pids.max"},
	}
	want := map[Version]map[string]string{
		V1: {"cpu": "256", "memory": fmt.Sprint(64 * mi), "pids": "100"},
		V2: {"cpu": "10", "memory": fmt.Sprint(64 * mi), "pids": "100"},
	}[v]
	for c, f := range files {
		if got := readT(t, cgFile(v, c, parent, f[0], f[1])); got != want[c] {
			t.Errorf("Guaranteed pod %s: %s, want %s", c, got, want[c])
		}
	}
	if v == V2 {
		if got := readT(t, cgFile(v, "cpu", parent, "", "cpu.max")); got != "25000 100000" {
			t.Errorf("Guaranteed pod cpu.max %q, want \"25000 100000\"", got)
		}
	} else if got := readT(t, cgFile(v, "cpu", parent, "cpu.cfs_quota_us", "")); got != "25000" {
		t.Errorf("Guaranteed pod cpu.cfs_quota_us %s, want 25000", got)
	}
	rc, err := m.ReadPodCgroup(ctx, pod)
	if err != nil {
		t.Fatalf("ReadPodCgroup: %v", err)
	}
	got := fmt.Sprint(*rc.CPUShares, *rc.CPUQuota, *rc.CPUPeriod, *rc.Memory)
	if w := fmt.Sprint(map[Version]int{V1: 256, V2: 237}[v], 25000, 100000, 64*mi); got != w {
		t.Errorf("ReadPodCgroup of the Guaranteed pod: shares, quota, period, memory %s, want %s", got, w)
	}
	if err := m.DestroyPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if exists(cgFile(v, "cpu", parent, "", "")) {
		t.Errorf("%s left after DestroyPod", parent)
	}
}
