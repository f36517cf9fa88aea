package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/agenttest"
)

// realCgroups stops the test unless this machine's cgroups can be written
// (skip, or fail with $NODEKIT_REQUIRE_INTEGRATION set), and returns their
// version.
func realCgroups(t *testing.T) Version {
	t.Helper()
	if os.Geteuid() != 0 {
		agenttest.RequireIntegration(t, "cgroups", errors.New("writing cgroups needs root"))
	}
	v, err := DetectVersion(defaultRoot)
	if err != nil {
		agenttest.RequireIntegration(t, "cgroups", err)
	}
	return v
}

// testCgroupRoot creates a cgroup root of the test's own, /nodekit-test-<random>,
// in every hierarchy; cleanup kills what is left in it and removes it.
func testCgroupRoot(t *testing.T, v Version) string {
	t.Helper()
	d, err := newFSDriver(defaultRoot, v, killProcess, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.checkControllers(); err != nil {
		agenttest.RequireIntegration(t, "cgroups", err)
	}
	name := CgroupName{fmt.Sprintf("nodekit-test-%08x", rand.Uint32())}
	_, ctx := ktesting.NewTestContext(t)
	if err := d.Apply(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(context.WithoutCancel(ctx), name); err != nil {
			t.Errorf("remove the test's cgroup root: %v", err)
		}
	})
	return name.ToCgroupfs()
}

// cgFile is a control file of the cgroup at literal: under the
// controller's hierarchy on v1, in the unified tree on v2.
func cgFile(v Version, controller, literal, v1file, v2file string) string {
	if v == V2 {
		return filepath.Join(defaultRoot, literal, v2file)
	}
	return filepath.Join(defaultRoot, controller, literal, v1file)
}

// hybridDir is literal's directory in the hybrid layout's cgroup2 mount,
// or "" without one.
func hybridDir(v Version, literal string) string {
	unified := filepath.Join(defaultRoot, "unified")
	if magic, err := fsMagic(unified); v != V1 || err != nil || magic != unix.CGROUP2_SUPER_MAGIC {
		return ""
	}
	return filepath.Join(unified, literal)
}

func TestRealCgroups(t *testing.T) {
	v := realCgroups(t)
	root := testCgroupRoot(t, v)
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(Config{
		CgroupRoot: root, CgroupsPerQOS: true, EnforceNodeAllocatable: []string{EnforcePods},
		Capacity:     rl("cpu", "2", "memory", "4Gi"),
		KubeReserved: rl("cpu", "500m", "memory", "512Mi"),
		PodPidsLimit: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup %s, root %s", v, root)
	guaranteedPodLimits(t, ctx, m, v, root)

	for _, tier := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		for _, c := range []string{"memory", "cpu"} {
			if dir := cgFile(v, c, root+"/"+tier, "", ""); !exists(dir) {
				t.Errorf("%s not created", dir)
			}
		}
	}
	if got := readT(t, cgFile(v, "memory", root+"/kubepods", "memory.limit_in_bytes", "memory.max")); got != strconv.FormatInt(3584*mi, 10) {
		t.Errorf("kubepods memory limit %s, want 3.5Gi", got)
	}

	burstable := podWith(fmt.Sprintf("b%08x", rand.Uint32()),
		res(rl("cpu", "100m", "memory", "32Mi"), rl("memory", "128Mi")),
		res(rl("cpu", "100m"), rl("memory", "64Mi")))
	parent, err := m.EnsurePod(ctx, burstable)
	if err != nil {
		t.Fatal(err)
	}
	if want := root + "/kubepods/burstable/pod" + string(burstable.UID); parent != want {
		t.Fatalf("cgroup parent %q, want %q", parent, want)
	}
	if got := readT(t, cgFile(v, "memory", parent, "memory.limit_in_bytes", "memory.max")); got != strconv.FormatInt(192*mi, 10) {
		t.Errorf("pod memory limit %s, want 192Mi", got)
	}
	// Read back as upstream's GetPodCgroupConfig: on v2 the weight (8)
	// converts back to 185 shares, not the 204 written.
	if rc, err := m.ReadPodCgroup(ctx, burstable); err != nil {
		t.Errorf("ReadPodCgroup: %v", err)
	} else if got, want := fmt.Sprint(*rc.CPUShares, *rc.CPUQuota, *rc.Memory), fmt.Sprint(map[Version]int{V1: 204, V2: 185}[v], -1, 192*mi); got != want {
		t.Errorf("ReadPodCgroup of the burstable pod: shares, quota, memory %s, want %s", got, want)
	}
	if dir := hybridDir(v, parent); dir != "" && !exists(dir) {
		t.Errorf("%s not created in the hybrid cgroup2 mount", dir)
	}
	bestEffort := podWith(fmt.Sprintf("be%08x", rand.Uint32()), v1.ResourceRequirements{})
	beParent, err := m.EnsurePod(ctx, bestEffort)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(beParent, root+"/kubepods/besteffort/pod") {
		t.Errorf("BestEffort cgroup parent %q", beParent)
	}
	if got, want := readT(t, cgFile(v, "cpu", beParent, "cpu.shares", "cpu.weight")), map[Version]string{V1: "2", V2: "1"}[v]; got != want {
		t.Errorf("BestEffort pod cpu %s, want %s", got, want)
	}
	if err := m.UpdateQOS(ctx, []*v1.Pod{burstable, bestEffort}); err != nil {
		t.Fatal(err)
	}
	if got, want := readT(t, cgFile(v, "cpu", root+"/kubepods/burstable", "cpu.shares", "cpu.weight")), map[Version]string{V1: "204", V2: "8"}[v]; got != want {
		t.Errorf("burstable tier cpu %s, want %s", got, want)
	}

	// A process left in the pod's cgroup is killed by DestroyPod.
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it, so the cgroup empties
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = <-exited // killed: Wait reports the signal
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(cgFile(v, "memory", parent, "cgroup.procs", "cgroup.procs"), []byte(pid), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/" + pid + "/cgroup"); !strings.Contains(string(b), parent+"\n") {
		t.Fatalf("sleep %s not in %s:\n%s", pid, parent, b)
	}
	if uids, err := m.ListPodCgroups(ctx); err != nil || len(uids) != 2 {
		t.Errorf("ListPodCgroups = %v, %v", uids, err)
	}
	start := time.Now()
	if err := m.DestroyPod(ctx, burstable.UID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("sleep ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sleep still running after DestroyPod")
	}
	t.Logf("DestroyPod killed the pod's process and removed its cgroup in %v", time.Since(start).Round(time.Millisecond))
	for _, c := range []string{"memory", "cpu", "pids", "cpuset"} {
		if dir := cgFile(v, c, parent, "", ""); exists(dir) {
			t.Errorf("%s left after DestroyPod", dir)
		}
	}
	if dir := hybridDir(v, parent); dir != "" && exists(dir) {
		t.Errorf("%s left after DestroyPod", dir)
	}
	if err := m.DestroyPod(ctx, bestEffort.UID); err != nil {
		t.Fatal(err)
	}
	if uids, err := m.ListPodCgroups(ctx); err != nil || len(uids) != 0 {
		t.Errorf("ListPodCgroups after destroying both = %v, %v", uids, err)
	}
}

// TestRealCgroup2Subtree runs the v2 writer on a real cgroup2 tree: on a
// hybrid machine, a directory of the test's own under the cgroup2 mount
// (/sys/fs/cgroup/unified), whose controllers all belong to v1; there
// creation, killing and removal can still be checked. A pure v2 machine
// runs TestRealCgroups on v2 instead.
func TestRealCgroup2Subtree(t *testing.T) {
	if realCgroups(t) != V1 {
		t.Skip("not a hybrid layout: TestRealCgroups covers cgroup v2 here")
	}
	unified := filepath.Join(defaultRoot, "unified")
	if magic, err := fsMagic(unified); err != nil || magic != unix.CGROUP2_SUPER_MAGIC {
		t.Skip("no cgroup2 mount at /sys/fs/cgroup/unified")
	}
	_, ctx := ktesting.NewTestContext(t)
	root := filepath.Join(unified, fmt.Sprintf("nodekit-test-%08x", rand.Uint32()))
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := newFSDriver(root, VersionUnknown, killProcess, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.removeTree(context.WithoutCancel(ctx), root); err != nil {
			t.Error(err)
		}
	})
	if d.version != V2 {
		t.Fatalf("detected %v under %s", d.version, root)
	}
	name := CgroupName{"kubepods", "besteffort", "pod1"}
	if err := d.Apply(ctx, name, &ResourceConfig{CPUShares: ptr(uint64(2))}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = <-exited // killed: Wait reports the signal
	})
	dir := filepath.Join(root, name.ToCgroupfs())
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if kids, err := d.Children(ctx, CgroupName{"kubepods", "besteffort"}); err != nil || len(kids) != 1 || kids[0] != "pod1" {
		t.Errorf("Children = %v, %v", kids, err)
	}
	if err := d.Destroy(ctx, CgroupName{"kubepods"}); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("sleep ended with %v, want killed", err)
	}
	exited <- nil
	if exists(filepath.Join(root, "kubepods")) {
		t.Error("kubepods left")
	}
}
