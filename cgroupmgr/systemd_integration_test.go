package cgroupmgr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/localsystemd"
)

// hostSystemdEnv, set to "host", makes the systemd driver's tests use
// this machine's own systemd (PID 1, on the system bus) instead of a
// private one. internal/localvm's cgroup v2 suite sets it in its guest,
// whose systemd runs the unified hierarchy; never set it on a machine
// whose systemd matters, as the tests create and stop kubepods.slice.
const hostSystemdEnv = "NODEKIT_SYSTEMD"

// testSystemd is the systemd a test of the systemd driver runs against.
type testSystemd struct {
	// BusAddress is its system bus; CgroupBase its root cgroup as this
	// process sees the hierarchy ("" for the host's PID 1).
	BusAddress, CgroupBase string
	// inNS is the command prefix that runs a program in its PID, mount
	// and cgroup namespaces (none for the host's PID 1).
	inNS []string
}

// command is name run where this systemd is PID 1.
func (s *testSystemd) command(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, s.inNS...), name), args...)
	return exec.Command(argv[0], argv[1:]...)
}

// privateSystemd starts a real systemd of the test's own
// (internal/localsystemd) and stops it at cleanup; with
// $NODEKIT_SYSTEMD=host it is this machine's PID 1 instead.
func privateSystemd(t *testing.T) *testSystemd {
	t.Helper()
	if os.Getenv(hostSystemdEnv) == "host" {
		agenttest.SkipShort(t, "the host's systemd")
		comm, err := os.ReadFile("/proc/1/comm")
		if err == nil && strings.TrimSpace(string(comm)) != "systemd" {
			err = fmt.Errorf("PID 1 is %q", strings.TrimSpace(string(comm)))
		}
		agenttest.RequireIntegration(t, "systemd as PID 1 ($"+hostSystemdEnv+"=host)", err)
		return &testSystemd{BusAddress: DefaultSystemdBus}
	}
	sd := agenttest.StartSystemd(t, localsystemd.Config{})
	enter, err := sd.Enter()
	if err != nil {
		t.Fatal(err)
	}
	return &testSystemd{BusAddress: sd.BusAddress, CgroupBase: sd.CgroupBase, inNS: enter}
}

// unitProp reads one property of a slice from systemd.
func unitProp(t *testing.T, c *sddbus.Conn, unit, name string) any {
	t.Helper()
	p, err := c.GetUnitTypePropertyContext(t.Context(), unit, "Slice", name)
	if err != nil {
		t.Fatalf("%s %s: %v", unit, name, err)
	}
	return p.Value.Value()
}

func activeState(t *testing.T, c *sddbus.Conn, unit string) string {
	t.Helper()
	p, err := c.GetUnitPropertyContext(t.Context(), unit, "ActiveState")
	if err != nil {
		t.Fatalf("%s ActiveState: %v", unit, err)
	}
	s, _ := p.Value.Value().(string)
	return s
}

// podCase is a pod and what its slice must hold: on v1 shares and
// cfsQuota, on v2 weight, cpuMax and systemd's quotaPerSec.
type podCase struct {
	pod               *v1.Pod
	parent            string
	shares, cfsQuota  string
	memory, tasksUnit string
	weight, cpuMax    string
	quotaPerSec       uint64
}

// TestSystemdDriverRealSystemd runs the systemd driver against a real
// systemd: the QoS slices and the pods' slices get upstream kubelet's
// names and limits (read back from the cgroup files and from systemd),
// DestroyPod stops a pod's slice with a process in it, and nothing of the
// pod is left in any hierarchy. The numbers are what upstream's cm
// computes for the same node and pods (ResourceConfigForPod and the QoS
// manager: shares = requests*1024/1000, quota = limits*period/1000, the
// burstable tier's shares the sum of its pods' requests).
func TestSystemdDriverRealSystemd(t *testing.T) {
	v := realCgroups(t)
	sd := privateSystemd(t)
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(Config{
		Driver: DriverSystemd, CgroupsPerQOS: true, EnforceNodeAllocatable: []string{EnforcePods},
		Capacity:     rl("cpu", "2", "memory", "4Gi"),
		KubeReserved: rl("cpu", "500m", "memory", "512Mi"),
		PodPidsLimit: 100,
		SystemdBus:   sd.BusAddress, SystemdCgroupBase: sd.CgroupBase,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dialSystemdBus(sd.BusAddress) })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := func(literal string) string { return sd.CgroupBase + literal }
	t.Logf("cgroup %s; systemd's root is %s on the host", v, sd.CgroupBase)

	for _, unit := range []string{"kubepods.slice", "kubepods-burstable.slice", "kubepods-besteffort.slice"} {
		if s := activeState(t, conn, unit); s != "active" {
			t.Errorf("%s is %q, want active", unit, s)
		}
	}
	kubepods := "/kubepods.slice"
	if got := readT(t, cgFile(v, "memory", host(kubepods), "memory.limit_in_bytes", "memory.max")); got != strconv.FormatInt(3584*mi, 10) {
		t.Errorf("kubepods.slice memory limit %s, want 3.5Gi", got)
	}
	if got, want := readT(t, cgFile(v, "cpu", host(kubepods), "cpu.shares", "cpu.weight")), map[Version]string{V1: "1536", V2: "59"}[v]; got != want {
		t.Errorf("kubepods.slice cpu %s, want %s (1.5 CPUs allocatable)", got, want)
	}
	if prop := map[Version]string{V1: "MemoryLimit", V2: "MemoryMax"}[v]; unitProp(t, conn, "kubepods.slice", prop) != uint64(3584*mi) {
		t.Errorf("systemd's %s of kubepods.slice is %v, want 3.5Gi", prop, unitProp(t, conn, "kubepods.slice", prop))
	}
	if v == V2 {
		if got := unitProp(t, conn, "kubepods.slice", "CPUWeight"); got != uint64(59) {
			t.Errorf("systemd's CPUWeight of kubepods.slice is %v, want 59", got)
		}
	}
	beTier := "/kubepods.slice/kubepods-besteffort.slice"
	if got, want := readT(t, cgFile(v, "cpu", host(beTier), "cpu.shares", "cpu.weight")), map[Version]string{V1: "2", V2: "1"}[v]; got != want {
		t.Errorf("besteffort tier cpu %s, want %s", got, want)
	}

	uid := func(p string) string {
		return fmt.Sprintf("%s%04x-%04x-4e1f", p, rand.Uint32()&0xffff, rand.Uint32()&0xffff)
	}
	// 505m of CPU is a quota of 50500us per 100ms; systemd keeps whole
	// percents, so upstream's systemd manager rounds it up to 51000 and
	// writes that to the files too.
	guaranteed := podWith(uid("a"), res(rl("cpu", "505m", "memory", "64Mi"), rl("cpu", "505m", "memory", "64Mi")))
	burstable := podWith(uid("b"),
		res(rl("cpu", "100m", "memory", "32Mi"), rl("memory", "128Mi")),
		res(rl("cpu", "100m"), rl("memory", "64Mi")))
	bestEffort := podWith(uid("c"), v1.ResourceRequirements{})
	esc := func(p *v1.Pod) string { return strings.ReplaceAll(string(p.UID), "-", "_") }
	// On v2 the weights are upstream's getCPUWeight of the shares
	// (1 + (shares-2)*9999/262142): 517 is 20, 204 is 8, 2 is 1.
	cases := []podCase{
		{guaranteed, "/kubepods.slice/kubepods-pod" + esc(guaranteed) + ".slice", "517", "51000", strconv.FormatInt(64*mi, 10), "kubepods-pod" + esc(guaranteed) + ".slice",
			"20", "51000 100000", 510000},
		{burstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + esc(burstable) + ".slice", "204", "-1", strconv.FormatInt(192*mi, 10), "kubepods-burstable-pod" + esc(burstable) + ".slice",
			"8", "max 100000", systemdInfinity},
		{bestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + esc(bestEffort) + ".slice", "2", "-1", "", "kubepods-besteffort-pod" + esc(bestEffort) + ".slice",
			"1", "max 100000", systemdInfinity},
	}
	for _, tc := range cases {
		parent, err := m.EnsurePod(ctx, tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if parent != tc.parent {
			t.Errorf("cgroup parent %q, want %q (kubelet's GetPodCgroupParent)", parent, tc.parent)
			continue
		}
		if s := activeState(t, conn, tc.tasksUnit); s != "active" {
			t.Errorf("%s is %q", tc.tasksUnit, s)
		}
		if v == V2 {
			checkPodUnitV2(t, conn, tc)
			continue
		}
		if got := unitProp(t, conn, tc.tasksUnit, "CPUShares"); fmt.Sprint(got) != tc.shares {
			t.Errorf("systemd's CPUShares of %s is %v, want %s", tc.tasksUnit, got, tc.shares)
		}
		if got := unitProp(t, conn, tc.tasksUnit, "TasksMax"); got != uint64(100) {
			t.Errorf("systemd's TasksMax of %s is %v, want 100", tc.tasksUnit, got)
		}
		for _, h := range []string{"cpuset", "systemd", "unified"} {
			if dir := filepath.Join(defaultRoot, h, host(parent)); !exists(dir) {
				t.Errorf("%s not created", dir)
			}
		}
	}
	// systemd writes its properties to the files again on a reload: they
	// must agree with what the driver wrote.
	if err := conn.ReloadContext(ctx); err != nil {
		t.Fatal(err)
	}
	if v == V1 {
		checkPodFilesV1(t, cases, host)
	} else {
		checkPodFilesV2(t, cases, host)
	}
	// Right after a reload systemd may still be realizing its slices'
	// cgroups: a QoS update then can find a slice's directory missing
	// (seen once on cgroup v2: ENOENT writing kubepods.slice's
	// cgroup.subtree_control). The agent updates the QoS cgroups again on
	// its next pass; so does the test, for up to 10 s.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := m.UpdateQOS(ctx, []*v1.Pod{guaranteed, burstable, bestEffort})
		if err != nil {
			t.Logf("UpdateQOS after the reload: %v", err)
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("UpdateQOS after the reload never succeeded: %v", err)
	}
	rest(t, ctx, m, conn, sd, v, guaranteed, burstable, bestEffort)
}

func checkPodFilesV1(t *testing.T, cases []podCase, host func(string) string) {
	t.Helper()
	v := V1
	for _, tc := range cases {
		parent := tc.parent
		if got := readT(t, cgFile(v, "cpu", host(parent), "cpu.shares", "")); got != tc.shares {
			t.Errorf("%s cpu.shares %s, want %s", parent, got, tc.shares)
		}
		if got := readT(t, cgFile(v, "cpu", host(parent), "cpu.cfs_quota_us", "")); got != tc.cfsQuota {
			t.Errorf("%s cpu.cfs_quota_us %s, want %s", parent, got, tc.cfsQuota)
		}
		if tc.memory != "" {
			if got := readT(t, cgFile(v, "memory", host(parent), "memory.limit_in_bytes", "")); got != tc.memory {
				t.Errorf("%s memory.limit_in_bytes %s, want %s", parent, got, tc.memory)
			}
		}
		if got := readT(t, cgFile(v, "pids", host(parent), "pids.max", "")); got != "100" {
			t.Errorf("%s pids.max %s, want 100 (podPidsLimit)", parent, got)
		}
	}
}

// rest checks the burstable tier after UpdateQOS, the listing, and the
// removal of the pods.
func rest(t *testing.T, ctx context.Context, m *Manager, conn *sddbus.Conn, sd *testSystemd, v Version, guaranteed, burstable, bestEffort *v1.Pod) {
	t.Helper()
	host := func(literal string) string { return sd.CgroupBase + literal }
	if got, want := readT(t, cgFile(v, "cpu", host("/kubepods.slice/kubepods-burstable.slice"), "cpu.shares", "cpu.weight")), map[Version]string{V1: "204", V2: "8"}[v]; got != want {
		t.Errorf("burstable tier cpu %s, want %s", got, want)
	}
	if uids, err := m.ListPodCgroups(ctx); err != nil || len(uids) != 3 {
		t.Errorf("ListPodCgroups = %v, %v; want the three pods", uids, err)
	}
	destroyWithProcess(t, ctx, m, conn, burstable, sd.CgroupBase, v)
	// A pod whose slice was stopped gets it back, active, with its limits.
	parent, err := m.EnsurePod(ctx, burstable)
	if err != nil {
		t.Fatal(err)
	}
	if s := activeState(t, conn, "kubepods-burstable-pod"+strings.ReplaceAll(string(burstable.UID), "-", "_")+".slice"); s != "active" {
		t.Errorf("the burstable pod's slice is %q after EnsurePod again, want active", s)
	}
	if got := readT(t, cgFile(v, "memory", host(parent), "memory.limit_in_bytes", "memory.max")); got != strconv.FormatInt(192*mi, 10) {
		t.Errorf("%s memory limit %s after EnsurePod again, want 192Mi", parent, got)
	}
	if err := m.DestroyPod(ctx, burstable.UID); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*v1.Pod{guaranteed, bestEffort} {
		if err := m.DestroyPod(ctx, p.UID); err != nil {
			t.Fatal(err)
		}
	}
	if uids, err := m.ListPodCgroups(ctx); err != nil || len(uids) != 0 {
		t.Errorf("ListPodCgroups after DestroyPod of all = %v, %v", uids, err)
	}
}

// destroyWithProcess has systemd run a process in a unit below pod's
// slice, as the runtime puts a container there, and checks that
// DestroyPod stops the slice, kills the process and leaves no directory
// of the pod anywhere. (The process is systemd's: a host PID does not
// exist in systemd's PID namespace, so a scope cannot adopt one.)
func destroyWithProcess(t *testing.T, ctx context.Context, m *Manager, conn *sddbus.Conn, pod *v1.Pod, base string, v Version) {
	t.Helper()
	name, err := m.PodCgroupName(pod)
	if err != nil {
		t.Fatal(err)
	}
	slice, _ := sliceUnits(name)
	unit := "nodekit-test-ctr.service"
	ch := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "replace", []sddbus.Property{
		sddbus.PropSlice(slice), sddbus.PropExecStart([]string{"/bin/sleep", "100"}, false),
		prop("Delegate", true), prop("DefaultDependencies", false),
	}, ch); err != nil {
		t.Fatal(err)
	}
	if res := <-ch; res != "done" {
		t.Fatalf("start %s: %s", unit, res)
	}
	literal := base + name.ToSystemd()
	// On v1 systemd tracks the unit's processes in its name=systemd
	// hierarchy (a controller hierarchy only once the unit accounts for
	// it).
	procs := cgFile(v, "systemd", literal+"/"+unit, "cgroup.procs", "cgroup.procs")
	pids := strings.Fields(readT(t, procs))
	if len(pids) != 1 {
		t.Fatalf("%s holds %q, want the one sleep", procs, pids)
	}
	pid, _ := strconv.Atoi(pids[0])
	start := time.Now()
	if err := m.DestroyPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("sleep (pid %d) still running after DestroyPod", pid)
	}
	t.Logf("DestroyPod stopped %s with %s (pid %d) in it in %v", slice, unit, pid, time.Since(start).Round(time.Millisecond))
	if s := activeState(t, conn, slice); s != "inactive" {
		t.Errorf("%s is %q after DestroyPod, want inactive", slice, s)
	}
	hs := []string{"memory", "cpu", "cpuacct", "pids", "cpuset", "blkio", "devices", "freezer", "systemd", "unified"}
	if v == V2 {
		hs = []string{""}
	}
	for _, h := range hs {
		if dir := filepath.Join(defaultRoot, h, literal); exists(dir) {
			t.Errorf("%s left after DestroyPod", dir)
		}
	}
}
