package cgroupmgr

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
)

func nodeConfig(root string, k *killRecorder) Config {
	return Config{
		Root: root, Version: V1, CgroupsPerQOS: true,
		EnforceNodeAllocatable: []string{EnforcePods},
		Capacity:               rl("cpu", "4", "memory", "8Gi", "pid", "4096"),
		KubeReserved:           rl("cpu", "500m", "memory", "1Gi"),
		SystemReserved:         rl("cpu", "500m", "memory", "1Gi", "pid", "96"),
		KillProcess:            k.kill,
	}
}

var (
	burstablePod = podWith("b-1234",
		res(rl("cpu", "250m", "memory", "64Mi"), rl("memory", "128Mi")),
		res(rl("cpu", "250m"), rl("memory", "64Mi")))
	bestEffortPod  = podWith("be-1", v1.ResourceRequirements{})
	guaranteedPod  = podWith("g-1", res(rl("cpu", "1", "memory", "256Mi"), rl("cpu", "1", "memory", "256Mi")))
	burstableOther = podWith("b-2", res(rl("cpu", "500m", "memory", "1Gi"), nil))
)

func TestManagerOnV1(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	k := &killRecorder{}
	m, err := New(nodeConfig(root, k))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnsurePod(ctx, burstablePod); err == nil || !strings.Contains(err.Error(), "Start") {
		t.Fatalf("EnsurePod before Start: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f := func(h string, parts ...string) string {
		return readT(t, filepath.Join(append([]string{root, h}, parts...)...))
	}

	// kubepods sized to capacity - reserved; the tiers below it.
	for _, c := range []struct{ got, want string }{
		{f("cpu", "kubepods", "cpu.shares"), "3072"},
		{f("memory", "kubepods", "memory.limit_in_bytes"), "6442450944"},
		{f("pids", "kubepods", "pids.max"), "4000"},
		{f("cpu", "kubepods", "besteffort", "cpu.shares"), "2"},
		{f("cpu", "kubepods", "burstable", "cpu.shares"), "<missing>"}, // until UpdateQOS
		{f("cpuset", "kubepods", "burstable", "cpuset.cpus"), "0-3"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}

	for _, tc := range []struct {
		pod    *v1.Pod
		parent string
		files  map[string]string // hierarchy/file -> content
	}{
		{burstablePod, "/kubepods/burstable/podb-1234", map[string]string{
			"memory/memory.limit_in_bytes": "201326592", "cpu/cpu.shares": "512", "cpu/cpu.cfs_quota_us": "<missing>",
		}},
		{bestEffortPod, "/kubepods/besteffort/podbe-1", map[string]string{
			"cpu/cpu.shares": "2", "memory/memory.limit_in_bytes": "<missing>",
		}},
		{guaranteedPod, "/kubepods/podg-1", map[string]string{
			"cpu/cpu.shares": "1024", "cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000",
			"memory/memory.limit_in_bytes": "268435456",
		}},
	} {
		parent, err := m.EnsurePod(ctx, tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if parent != tc.parent {
			t.Errorf("%s: cgroup parent %q, want %q", tc.pod.Name, parent, tc.parent)
		}
		if got, err := m.PodCgroupParent(tc.pod); err != nil || got != parent {
			t.Errorf("%s: PodCgroupParent = %q, %v; want EnsurePod's %q", tc.pod.Name, got, err, parent)
		}
		for hf, want := range tc.files {
			h, file, _ := strings.Cut(hf, "/")
			if got := readT(t, filepath.Join(root, h, parent, file)); got != want {
				t.Errorf("%s: %s = %q, want %q", tc.pod.Name, hf, got, want)
			}
		}
		if ok, err := m.PodCgroupExists(ctx, tc.pod); err != nil || !ok {
			t.Errorf("%s: PodCgroupExists = %v, %v", tc.pod.Name, ok, err)
		}
	}
	if ok, err := m.PodCgroupExists(ctx, burstableOther); err != nil || ok {
		t.Errorf("PodCgroupExists of a pod never ensured = %v, %v", ok, err)
	}

	uids, err := m.ListPodCgroups(ctx)
	if err != nil || !reflect.DeepEqual(uids, []types.UID{"b-1234", "be-1", "g-1"}) {
		t.Fatalf("ListPodCgroups = %v, %v", uids, err)
	}

	// UpdateQOS: burstable shares follow the Burstable pods' requests.
	if err := m.UpdateQOS(ctx, []*v1.Pod{burstablePod, bestEffortPod, guaranteedPod, burstableOther}); err != nil {
		t.Fatal(err)
	}
	if got := f("cpu", "kubepods", "burstable", "cpu.shares"); got != "1024" { // 250m+250m+500m
		t.Errorf("burstable cpu.shares = %s, want 1024", got)
	}
	if got := f("cpu", "kubepods", "besteffort", "cpu.shares"); got != "2" {
		t.Errorf("besteffort cpu.shares = %s", got)
	}
	if got := f("memory", "kubepods", "burstable", "memory.limit_in_bytes"); got != "<missing>" {
		t.Errorf("burstable memory limit %s without QOSReserved", got)
	}
	if err := m.UpdateQOS(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := f("cpu", "kubepods", "burstable", "cpu.shares"); got != "2" {
		t.Errorf("burstable cpu.shares with no pods = %s, want 2", got)
	}

	// DestroyPod kills what is left, removes the pod's cgroup everywhere.
	writeT(t, filepath.Join(root, "memory", "kubepods", "burstable", "podb-1234", "cgroup.procs"), "501\n")
	if err := m.DestroyPod(ctx, "b-1234"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(k.pids, []int{501}) {
		t.Errorf("killed %v, want [501]", k.pids)
	}
	for _, h := range []string{"cpu,cpuacct", "memory", "cpuset", "pids", "systemd"} {
		if exists(filepath.Join(root, h, "kubepods", "burstable", "podb-1234")) {
			t.Errorf("%s: pod cgroup left", h)
		}
	}
	// An orphan found on disk (say only in one hierarchy) is listed and
	// destroyed by UID alone.
	mkdirAll(t, filepath.Join(root, "pids", "kubepods", "besteffort", "podorphan"))
	uids, _ = m.ListPodCgroups(ctx)
	if !slices.Contains(uids, "orphan") || slices.Contains(uids, "b-1234") {
		t.Errorf("ListPodCgroups = %v", uids)
	}
	for _, uid := range []types.UID{"orphan", "g-1", "be-1", "never-existed"} {
		if err := m.DestroyPod(ctx, uid); err != nil {
			t.Errorf("DestroyPod(%s): %v", uid, err)
		}
	}
	if uids, _ := m.ListPodCgroups(ctx); len(uids) != 0 {
		t.Errorf("ListPodCgroups after destroying all = %v", uids)
	}
	if err := m.DestroyPod(ctx, "bad_uid"); err == nil {
		t.Error("DestroyPod accepted a UID with _")
	}
}

func TestManagerCgroupRoot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	cfg := nodeConfig(root, &killRecorder{})
	cfg.CgroupRoot = "/custom-root"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Start with a missing cgroup root: %v", err)
	}
	for _, h := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd"} {
		mkdirAll(t, filepath.Join(root, h, "custom-root"))
	}
	writeT(t, filepath.Join(root, "cpuset", "custom-root", "cpuset.cpus"), "1")
	writeT(t, filepath.Join(root, "cpuset", "custom-root", "cpuset.mems"), "0")
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(ctx, burstablePod)
	if err != nil || parent != "/custom-root/kubepods/burstable/podb-1234" {
		t.Fatalf("EnsurePod = %q, %v", parent, err)
	}
	if got := readT(t, filepath.Join(root, "cpuset", parent, "cpuset.cpus")); got != "1" {
		t.Errorf("pod cpuset.cpus = %q, want the custom root's", got)
	}
}

func TestManagerWithoutQOSCgroups(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	m, err := New(Config{Root: root, Version: V1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(ctx, burstablePod)
	if err != nil || parent != "" {
		t.Errorf("EnsurePod = %q, %v; want the runtime's default", parent, err)
	}
	if ok, _ := m.PodCgroupExists(ctx, burstablePod); !ok {
		t.Error("PodCgroupExists false without QoS cgroups")
	}
	if got, err := m.PodCgroupParent(burstablePod); err != nil || got != "" {
		t.Errorf("PodCgroupParent = %q, %v; want the runtime's default", got, err)
	}
	if exists(filepath.Join(root, "memory", "kubepods")) {
		t.Error("kubepods created without CgroupsPerQOS")
	}
}

func TestManagerOnV2(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV2Root(t)
	cfg := nodeConfig(root, &killRecorder{})
	cfg.Version = V2
	cfg.PodPidsLimit = 1024
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(ctx, guaranteedPod)
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{
		"kubepods/memory.max":            "6442450944",
		"kubepods/cpu.weight":            "118",
		"kubepods/besteffort/cpu.weight": "1",
		parent + "/cpu.weight":           "39",
		parent + "/cpu.max":              "100000 100000",
		parent + "/memory.max":           "268435456",
		parent + "/pids.max":             "1024",
	} {
		if got := readT(t, filepath.Join(root, f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
}

// fakeDriver records applies; a memory limit below usage fails, as the
// kernel refuses it.
type fakeDriver struct {
	applied map[string]*ResourceConfig
	usage   map[string]int64
	applies int // calls to Apply
}

var (
	_ Driver     = (*fakeDriver)(nil)
	_ memoryUser = (*fakeDriver)(nil)
)

func (f *fakeDriver) Apply(_ context.Context, n CgroupName, rc *ResourceConfig) error {
	f.applies++
	if rc.Memory != nil && *rc.Memory < f.usage[n.ToCgroupfs()] {
		return errors.New("device or resource busy")
	}
	f.applied[n.ToCgroupfs()] = rc
	return nil
}
func (f *fakeDriver) Exists(context.Context, CgroupName) (bool, error)       { return true, nil }
func (f *fakeDriver) Children(context.Context, CgroupName) ([]string, error) { return nil, nil }
func (f *fakeDriver) Destroy(context.Context, CgroupName) error              { return nil }
func (f *fakeDriver) MemoryUsage(_ context.Context, n CgroupName) (int64, error) {
	return f.usage[n.ToCgroupfs()], nil
}

// startedWithReserve is a started Manager over a fakeDriver, with
// QOSReserved memory at 50%.
func startedWithReserve(ctx context.Context, t *testing.T) (*Manager, *fakeDriver) {
	t.Helper()
	fd := &fakeDriver{applied: map[string]*ResourceConfig{}, usage: map[string]int64{}}
	cfg := nodeConfig("", &killRecorder{})
	cfg.Backend = fd
	cfg.QOSReserved = map[v1.ResourceName]int64{v1.ResourceMemory: 50}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return m, fd
}

func TestUpdateQOSMemoryReserve(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, fd := startedWithReserve(ctx, t)
	pods := []*v1.Pod{guaranteedPod, burstablePod, burstableOther, bestEffortPod}
	if err := m.UpdateQOS(ctx, pods); err != nil {
		t.Fatal(err)
	}
	// allocatable 6Gi; Guaranteed requests 256Mi, Burstable 64Mi + 1Gi.
	burstable := 6*gi - 128*mi
	bestEffort := burstable - (64*mi+gi)/2
	if got := *fd.applied["/kubepods/burstable"].Memory; got != burstable {
		t.Errorf("burstable memory limit %d, want %d", got, burstable)
	}
	if got := *fd.applied["/kubepods/besteffort"].Memory; got != bestEffort {
		t.Errorf("besteffort memory limit %d, want %d", got, bestEffort)
	}
	if rc := fd.applied["/kubepods"]; rc.Memory != nil || rc.HugePageOthers == nil || *rc.HugePageOthers != unboundedHugePages {
		t.Errorf("kubepods tier config %s", cfgString(rc))
	}
	// Best effort already uses more than its new limit: it gets its usage.
	fd.usage["/kubepods/besteffort"] = bestEffort + 4096
	if err := m.UpdateQOS(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if got := *fd.applied["/kubepods/besteffort"].Memory; got != bestEffort+4096 {
		t.Errorf("besteffort memory limit %d, want the usage %d", got, bestEffort+4096)
	}
	var names []string
	for n := range fd.applied {
		names = append(names, n)
	}
	sort.Strings(names)
	if want := []string{"/kubepods", "/kubepods/besteffort", "/kubepods/burstable"}; !reflect.DeepEqual(names, want) {
		t.Errorf("applied %v", names)
	}
}

// EnsureQOS writes the tiers only when their sizes differ from those last
// written in full; UpdateQOS writes them every time, and a limit lowered
// to the usage, or a Start, makes the next EnsureQOS write again.
func TestEnsureQOSWritesOnlyChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, fd := startedWithReserve(ctx, t)
	step := func(what string, update func(context.Context, []*v1.Pod) error, pods []*v1.Pod, wantApplies int) {
		t.Helper()
		before := fd.applies
		if err := update(ctx, pods); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := fd.applies - before; got != wantApplies {
			t.Errorf("%s: %d tier writes, want %d", what, got, wantApplies)
		}
	}
	one := []*v1.Pod{guaranteedPod, burstablePod}
	step("first EnsureQOS", m.EnsureQOS, one, 3)
	step("EnsureQOS, same pods", m.EnsureQOS, one, 0)
	step("EnsureQOS, a BestEffort pod more", m.EnsureQOS, append(one, bestEffortPod), 0)
	step("UpdateQOS, same sizes", m.UpdateQOS, one, 3)
	step("EnsureQOS, a Burstable pod more", m.EnsureQOS, append(one, burstableOther), 3)
	if got, want := *fd.applied["/kubepods/burstable"].CPUShares, MilliCPUToShares(1000); got != want {
		t.Errorf("burstable shares %d, want %d", got, want)
	}
	step("EnsureQOS, back to the first pods", m.EnsureQOS, one, 3)

	// Usage above the wanted limit: the limit is the usage, so the next
	// EnsureQOS tries the wanted one again.
	fd.usage["/kubepods/besteffort"] = 8 * gi
	step("EnsureQOS, a Burstable pod more, besteffort over its limit", m.EnsureQOS, append(one, burstableOther), 6)
	step("EnsureQOS, same sizes after the usage fallback", m.EnsureQOS, append(one, burstableOther), 6)
	delete(fd.usage, "/kubepods/besteffort")
	step("EnsureQOS, same sizes, usage back under", m.EnsureQOS, append(one, burstableOther), 3)
	step("EnsureQOS, same sizes once written in full", m.EnsureQOS, append(one, burstableOther), 0)

	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	step("EnsureQOS after Start", m.EnsureQOS, append(one, burstableOther), 3)
}

func TestSystemdDriverWithoutBus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	bus := "unix:path=" + filepath.Join(t.TempDir(), "no_bus_socket")
	m, err := New(Config{Driver: DriverSystemd, CgroupsPerQOS: true, Root: fakeV1Root(t), Version: V1, SystemdBus: bus})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "Config.SystemdBus") || !strings.Contains(err.Error(), bus) {
		t.Fatalf("Start with the systemd driver and no bus: %v, want an error naming Config.SystemdBus and %s", err, bus)
	}
	// With a Driver of its own, systemd names reach the runtime.
	fd := &fakeDriver{applied: map[string]*ResourceConfig{}}
	m, _ = New(Config{Driver: DriverSystemd, CgroupsPerQOS: true, Backend: fd})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(ctx, podWith("12-34", res(rl("cpu", "100m"), nil)))
	if err != nil || parent != "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice" {
		t.Fatalf("EnsurePod = %q, %v", parent, err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Driver: "docker"}, "Config.Driver"},
		{Config{CgroupRoot: "relative"}, "not absolute"},
		{Config{CgroupRoot: "/a_b", CgroupsPerQOS: true}, "Config.CgroupRoot"},
		{Config{EnforceNodeAllocatable: []string{"pods"}}, "needs CgroupsPerQOS"},
		{Config{CgroupsPerQOS: true, EnforceNodeAllocatable: []string{"pods", "none"}}, "cannot be combined"},
		{Config{CgroupsPerQOS: true, EnforceNodeAllocatable: []string{"everything"}}, "unknown value"},
		{Config{CgroupsPerQOS: true, EnforceNodeAllocatable: []string{"kube-reserved"}}, "KubeReservedCgroup"},
		{Config{CgroupsPerQOS: true, EnforceNodeAllocatable: []string{"system-reserved-compressible"}}, "SystemReservedCgroup"},
		{Config{QOSReserved: map[v1.ResourceName]int64{v1.ResourceCPU: 10}}, "only memory"},
		{Config{QOSReserved: map[v1.ResourceName]int64{v1.ResourceMemory: 101}}, "percentage"},
		{Config{CPUCFSQuotaPeriod: 2e9}, "CPUCFSQuotaPeriod"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(Config{CgroupsPerQOS: true, EnforceNodeAllocatable: []string{"none"}}); err != nil {
		t.Errorf("none alone: %v", err)
	}
}

func TestEnforceReservedCgroups(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := fakeV1Root(t)
	cfg := nodeConfig(root, &killRecorder{})
	cfg.EnforceNodeAllocatable = []string{EnforcePods, EnforceSystemReserved, EnforceKubeReservedCompressible}
	cfg.SystemReservedCgroup = "/system.slice"
	cfg.KubeReservedCgroup = "/kube"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err == nil || !strings.Contains(err.Error(), "/system.slice") {
		t.Fatalf("Start with a missing system-reserved cgroup: %v", err)
	}
	d := newTestFS(t, root, V1, &killRecorder{})
	for _, n := range []CgroupName{{"system.slice"}, {"kube"}} {
		if err := d.Apply(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ p, want string }{
		{"cpu/system.slice/cpu.shares", "512"},
		{"memory/system.slice/memory.limit_in_bytes", "1073741824"},
		{"pids/system.slice/pids.max", "96"},
		{"cpu/kube/cpu.shares", "512"},
		{"memory/kube/memory.limit_in_bytes", "<missing>"}, // compressible only
	} {
		if got := readT(t, filepath.Join(root, c.p)); got != c.want {
			t.Errorf("%s = %q, want %q", c.p, got, c.want)
		}
	}
}
