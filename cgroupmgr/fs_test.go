package cgroupmgr

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestDetectVersion(t *testing.T) {
	if _, err := DetectVersion(t.TempDir()); err == nil || !strings.Contains(err.Error(), "set Config.Version") {
		t.Errorf("a plain directory: %v, want an error", err)
	}
	if _, err := DetectVersion(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("a missing directory: no error")
	}
	// This machine's own layout, whatever it is, is one of the two.
	if _, err := os.Stat("/sys/fs/cgroup"); err == nil {
		v, err := DetectVersion("/sys/fs/cgroup")
		t.Logf("/sys/fs/cgroup: %v, %v", v, err)
		if err == nil && v != V1 && v != V2 {
			t.Errorf("DetectVersion = %v", v)
		}
	}
}

func newTestFS(t *testing.T, root string, v Version, k *killRecorder) *fsDriver {
	t.Helper()
	d, err := newFSDriver(root, v, k.kill, clocktesting.NewFakeClock(time.Unix(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFSV1Apply(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	d := newTestFS(t, root, V1, &killRecorder{})
	var dirs []string
	for _, h := range d.hierarchies {
		dirs = append(dirs, filepath.Base(h.dir))
	}
	if want := []string{"blkio", "cpu,cpuacct", "cpuset", "devices", "hugetlb", "memory", "pids", "systemd"}; !reflect.DeepEqual(dirs, want) {
		t.Fatalf("hierarchies %v, want %v (links to cpu,cpuacct counted once)", dirs, want)
	}
	if err := d.checkControllers(); err != nil {
		t.Fatal(err)
	}

	name := CgroupName{"kubepods", "burstable", "pod1"}
	// The kernel lists every page size in a new hugetlb cgroup.
	writeT(t, filepath.Join(root, "hugetlb", "kubepods", "burstable", "pod1", "hugetlb.1GB.limit_in_bytes"), "9223372036854771712")
	rc := &ResourceConfig{
		CPUShares: ptr(uint64(512)), CPUQuota: ptr(int64(50000)), CPUPeriod: ptr(uint64(100000)),
		Memory: ptr(int64(128 * mi)), PidsLimit: ptr(int64(-1)),
		HugePageLimit: map[int64]int64{2 * mi: 4 * mi},
	}
	if err := d.Apply(ctx, name, rc); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb", "blkio", "devices", "systemd"} {
		if !exists(filepath.Join(root, h, "kubepods", "burstable", "pod1")) {
			t.Errorf("not created in %s", h)
		}
	}
	pod := func(h, f string) string { return readT(t, filepath.Join(root, h, "kubepods", "burstable", "pod1", f)) }
	for _, c := range []struct{ h, f, want string }{
		{"cpu", "cpu.shares", "512"},
		{"cpu", "cpu.cfs_quota_us", "50000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"memory", "memory.limit_in_bytes", "134217728"},
		{"pids", "pids.max", "max"},
		{"hugetlb", "hugetlb.2MB.limit_in_bytes", "4194304"},
		{"hugetlb", "hugetlb.1GB.limit_in_bytes", "0"}, // not asked for: none
		{"cpuset", "cpuset.cpus", "0-3"},
		{"cpuset", "cpuset.mems", "0"},
		{"memory", "cpu.shares", "<missing>"}, // each file only where its controller is
		{"blkio", "memory.limit_in_bytes", "<missing>"},
	} {
		if got := pod(c.h, c.f); got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.h, c.f, got, c.want)
		}
	}
	// Every cpuset level got CPUs and memory nodes.
	if got := readT(t, filepath.Join(root, "cpuset", "kubepods", "cpuset.cpus")); got != "0-3" {
		t.Errorf("kubepods cpuset.cpus = %q", got)
	}
	// An update leaves what it does not set.
	if err := d.Apply(ctx, name, &ResourceConfig{CPUShares: ptr(uint64(2))}); err != nil {
		t.Fatal(err)
	}
	if pod("cpu", "cpu.shares") != "2" || pod("memory", "memory.limit_in_bytes") != "134217728" {
		t.Errorf("update: shares %s memory %s", pod("cpu", "cpu.shares"), pod("memory", "memory.limit_in_bytes"))
	}

	ok, err := d.Exists(ctx, name)
	if err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	if err := os.Remove(filepath.Join(root, "pids", "kubepods", "burstable", "pod1", "pids.max")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "pids", "kubepods", "burstable", "pod1")); err != nil {
		t.Fatal(err)
	}
	if ok, _ := d.Exists(ctx, name); ok {
		t.Error("Exists with the pids directory missing")
	}
	kids, err := d.Children(ctx, CgroupName{"kubepods", "burstable"})
	if err != nil || !reflect.DeepEqual(kids, []string{"pod1"}) {
		t.Errorf("Children = %v, %v", kids, err)
	}
	if kids, err := d.Children(ctx, CgroupName{"absent"}); err != nil || len(kids) != 0 {
		t.Errorf("Children of a missing cgroup = %v, %v", kids, err)
	}
}

func TestFSV1EmptyCpusetParent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	writeT(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "")
	d := newTestFS(t, root, V1, &killRecorder{})
	err := d.Apply(ctx, CgroupName{"a"}, nil)
	if err == nil || !strings.Contains(err.Error(), "cpuset.cpus") {
		t.Fatalf("Apply under a cpuset without CPUs: %v", err)
	}
}

func TestFSV1MissingControllers(t *testing.T) {
	root := t.TempDir()
	mkdirAll(t, filepath.Join(root, "memory"))
	d := newTestFS(t, root, V1, &killRecorder{})
	err := d.checkControllers()
	if err == nil || !strings.Contains(err.Error(), "cpu, cpuacct, cpuset, pids") {
		t.Fatalf("checkControllers = %v", err)
	}
}

func TestFSDestroyKillsAndRemoves(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	k := &killRecorder{}
	d := newTestFS(t, root, V1, k)
	name := CgroupName{"kubepods", "pod9"}
	if err := d.Apply(ctx, name, &ResourceConfig{CPUShares: ptr(uint64(100))}); err != nil {
		t.Fatal(err)
	}
	// Processes in the pod and in a container below it, listed in two
	// hierarchies.
	writeT(t, filepath.Join(root, "memory", "kubepods", "pod9", "cgroup.procs"), "111\n222\n")
	writeT(t, filepath.Join(root, "memory", "kubepods", "pod9", "ctr", "cgroup.procs"), "333\n")
	writeT(t, filepath.Join(root, "cpu,cpuacct", "kubepods", "pod9", "cgroup.procs"), "111\n")
	if err := d.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	sort.Ints(k.pids)
	if !reflect.DeepEqual(k.pids, []int{111, 222, 333}) {
		t.Errorf("killed %v, want 111 222 333 once each", k.pids)
	}
	for _, h := range d.hierarchies {
		if exists(filepath.Join(h.dir, "kubepods", "pod9")) {
			t.Errorf("%s: pod cgroup left", h.dir)
		}
		if !exists(filepath.Join(h.dir, "kubepods")) {
			t.Errorf("%s: parent removed", h.dir)
		}
	}
	// Destroying what is gone is fine.
	if err := d.Destroy(ctx, name); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if err := d.Destroy(ctx, CgroupName{}); err == nil {
		t.Error("Destroy of the root accepted")
	}
}

func TestFSDestroyKillFails(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	k := &killRecorder{err: errors.New("operation not permitted")}
	d := newTestFS(t, root, V1, k)
	name := CgroupName{"pod1"}
	if err := d.Apply(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	writeT(t, filepath.Join(root, "memory", "pod1", "cgroup.procs"), "42\n")
	err := d.Destroy(ctx, name)
	if err == nil || !strings.Contains(err.Error(), "kill 42: operation not permitted") {
		t.Fatalf("Destroy = %v", err)
	}
	if !exists(filepath.Join(root, "memory", "pod1")) {
		t.Error("removed although its process could not be killed")
	}
}

func TestFSV2Apply(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV2Root(t)
	d := newTestFS(t, root, V2, &killRecorder{})
	if err := d.checkControllers(); err != nil {
		t.Fatal(err)
	}
	name := CgroupName{"kubepods", "burstable", "pod1"}
	rc := &ResourceConfig{
		CPUShares: ptr(uint64(256)), CPUQuota: ptr(int64(-1)), CPUPeriod: ptr(uint64(100000)),
		Memory: ptr(int64(64 * mi)), PidsLimit: ptr(int64(100)),
		HugePageLimit: map[int64]int64{2 * mi: 0},
	}
	if err := d.Apply(ctx, name, rc); err != nil {
		t.Fatal(err)
	}
	if got := readT(t, filepath.Join(root, "cgroup.subtree_control")); got != "+cpu +cpuset +hugetlb +io +memory +misc +pids +rdma" {
		t.Errorf("root subtree_control = %q", got)
	}
	dir := filepath.Join(root, "kubepods", "burstable", "pod1")
	for f, want := range map[string]string{
		"cpu.weight":      "10",
		"cpu.max":         "max 100000",
		"memory.max":      "67108864",
		"pids.max":        "100",
		"hugetlb.2MB.max": "0",
		"cpu.shares":      "<missing>",
	} {
		if got := readT(t, filepath.Join(dir, f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	if err := d.Apply(ctx, name, &ResourceConfig{CPUQuota: ptr(int64(25000)), CPUPeriod: ptr(uint64(100000)), Memory: ptr(int64(-1))}); err != nil {
		t.Fatal(err)
	}
	if got := readT(t, filepath.Join(dir, "cpu.max")); got != "25000 100000" {
		t.Errorf("cpu.max = %q", got)
	}
	if got := readT(t, filepath.Join(dir, "memory.max")); got != "max" {
		t.Errorf("memory.max = %q", got)
	}
	// The kernel fills cgroup.controllers of a child with what its parent
	// enabled; only then does it exist completely.
	if ok, _ := d.Exists(ctx, name); ok {
		t.Error("Exists without cgroup.controllers")
	}
	writeT(t, filepath.Join(dir, "cgroup.controllers"), "cpuset cpu io memory hugetlb pids")
	if ok, err := d.Exists(ctx, name); err != nil || !ok {
		t.Errorf("Exists = %v, %v", ok, err)
	}
	if u, err := d.MemoryUsage(ctx, name); err == nil {
		t.Errorf("MemoryUsage without memory.current = %d", u)
	}
	writeT(t, filepath.Join(dir, "memory.current"), "4096\n")
	if u, err := d.MemoryUsage(ctx, name); err != nil || u != 4096 {
		t.Errorf("MemoryUsage = %d, %v", u, err)
	}
	writeT(t, filepath.Join(dir, "cgroup.procs"), "7\n")
	k := &killRecorder{}
	d.kill = k.kill
	if err := d.Destroy(ctx, CgroupName{"kubepods"}); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "kubepods")) || !reflect.DeepEqual(k.pids, []int{7}) {
		t.Errorf("after Destroy: kubepods exists %v, killed %v", exists(filepath.Join(root, "kubepods")), k.pids)
	}
}

func TestFSV2NotARoot(t *testing.T) {
	if _, err := newFSDriver(t.TempDir(), V2, killProcess, nil); err == nil || !strings.Contains(err.Error(), "not a cgroup v2 root") {
		t.Fatalf("newFSDriver on a directory without cgroup.controllers: %v", err)
	}
}

func TestFSV1ApplyAncestorNotADirectory(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	writeT(t, filepath.Join(root, "memory", "kubepods"), "a file where a cgroup should be")
	d := newTestFS(t, root, V1, &killRecorder{})
	err := d.Apply(ctx, CgroupName{"kubepods", "besteffort", "pod1"}, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "memory", "kubepods")) {
		t.Fatalf("Apply below a file: %v, want an error naming %s", err, filepath.Join(root, "memory", "kubepods"))
	}
}
