package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/kubeletconf"
	"github.com/nodekit/nodekit/internal/localsystemd"
)

// The systemd cgroup driver end to end (issue #25): a private systemd
// (internal/localsystemd), containerd 2 in its PID, mount and cgroup
// namespaces with SystemdCgroup = true, and the node agent there too (so
// "/" is that systemd's root cgroup and its system bus is the
// namespace's /run/dbus/system_bus_socket, as on a host it booted). The
// agent's configuration says cgroupDriver: cgroupfs; containerd 2
// reports systemd over CRI RuntimeConfig and the agent follows it, as
// upstream kubelet does by default. Then upstream kubelet v1.37.2 runs
// the same pods on the same systemd and containerd, and the slices'
// unit properties and cgroup files must match.

// sdPodsLimit is the podPidsLimit both agents get: the pod slices'
// TasksMax.
const sdPodsLimit = 1024

// sdPods are the three pods, one per QoS class.
func sdPods() []*v1.Pod {
	rl := func(kv ...string) v1.ResourceList {
		out := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	pod := func(name string, req, lim v1.ResourceList) *v1.Pod {
		p := simplePod(name, v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.TerminationGracePeriodSeconds = new(int64)
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: req, Limits: lim}
		return p
	}
	return []*v1.Pod{
		pod("guaranteed", rl("cpu", "200m", "memory", "64Mi"), rl("cpu", "200m", "memory", "64Mi")),
		pod("burstable", rl("cpu", "100m", "memory", "32Mi"), rl("memory", "64Mi")),
		pod("besteffort", nil, nil),
	}
}

// sdWant is what the pods' slices hold, as upstream computes it
// (pkg/kubelet/cm/helpers_linux.go): cpu.shares from the requests
// (milliCPU*1024/1000, at least 2), the CFS quota from the CPU limit
// (milliCPU*100000/1000 per 100ms period; systemd's CPUQuotaPerSecUSec
// is that per second), the memory limit from the limits, TasksMax from
// podPidsLimit. "" is no limit.
var sdWant = map[string]struct{ shares, quota, quotaPerSec, memory string }{
	"guaranteed": {"204", "20000", "200000", "67108864"},
	"burstable":  {"102", "-1", "", "67108864"},
	"besteffort": {"2", "-1", "", ""},
}

// sdSlice is a pod's slice name below the agent's root, upstream's
// naming: kubepods-<qos>-pod<UID with "_">.slice, the Guaranteed one in
// kubepods.slice itself.
func sdSlice(p *v1.Pod) string {
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	switch p.Status.QOSClass {
	case v1.PodQOSGuaranteed:
		return "/kubepods.slice/kubepods-pod" + uid + ".slice"
	case v1.PodQOSBurstable:
		return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice"
	default:
		return "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid + ".slice"
	}
}

// sdView reads a private systemd's units and cgroup files.
type sdView struct {
	t    *testing.T
	sd   *localsystemd.Systemd
	conn *sddbus.Conn
}

func newSDView(t *testing.T, sd *localsystemd.Systemd) *sdView {
	t.Helper()
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return sd.Dial(context.WithoutCancel(t.Context())) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &sdView{t: t, sd: sd, conn: conn}
}

// file reads a cgroup file of the v1 hierarchy h at path (systemd's
// naming, below its root), "" when it is not there.
func (v *sdView) file(h, path, name string) string {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", h, v.sd.CgroupBase, path, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (v *sdView) exists(h, path string) bool {
	_, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, v.sd.CgroupBase, path))
	return err == nil
}

// prop reads a property of a unit of type typ ("Slice", "Scope"), as
// text.
func (v *sdView) prop(unit, typ, name string) string {
	v.t.Helper()
	p, err := v.conn.GetUnitTypePropertyContext(v.t.Context(), unit, typ, name)
	if err != nil {
		v.t.Fatalf("%s %s: %v", unit, name, err)
	}
	return fmt.Sprint(p.Value.Value())
}

func (v *sdView) state(unit string) string {
	v.t.Helper()
	p, err := v.conn.GetUnitPropertyContext(v.t.Context(), unit, "ActiveState")
	if err != nil {
		v.t.Fatalf("%s ActiveState: %v", unit, err)
	}
	return fmt.Sprint(p.Value.Value())
}

// maxPIDs is the smaller of kernel.pid_max and kernel.threads-max as a
// process in systemd's namespaces reads them (pid_max is per PID
// namespace on newer kernels).
func (v *sdView) maxPIDs() string {
	v.t.Helper()
	enter, err := v.sd.Enter()
	if err != nil {
		v.t.Fatal(err)
	}
	out, err := exec.Command(enter[0], append(enter[1:], "sh", "-c", "cat /proc/sys/kernel/pid_max /proc/sys/kernel/threads-max")...).Output()
	if err != nil {
		v.t.Fatalf("read pid_max: %v", err)
	}
	var least int64 = -1
	for _, f := range strings.Fields(string(out)) {
		var n int64
		if _, err := fmt.Sscan(f, &n); err == nil && (least < 0 || n < least) {
			least = n
		}
	}
	return fmt.Sprint(least)
}

// slice is what both agents are compared on for one slice: its unit
// state and properties, and the cgroup files the limits are in.
func (v *sdView) slice(path string) map[string]string {
	v.t.Helper()
	unit := filepath.Base(path)
	out := map[string]string{"ActiveState": v.state(unit)}
	for _, p := range []string{"CPUShares", "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "MemoryLimit", "TasksMax",
		"CPUAccounting", "MemoryAccounting", "TasksAccounting", "Slice"} {
		out[p] = v.prop(unit, "Slice", p)
	}
	// Upstream sets IOAccounting too; systemd 252 keeps it as
	// BlockIOAccounting on cgroup v1.
	out["BlockIOAccounting"] = v.prop(unit, "Slice", "BlockIOAccounting")
	for _, f := range [][2]string{{"cpu", "cpu.shares"}, {"cpu", "cpu.cfs_quota_us"}, {"cpu", "cpu.cfs_period_us"},
		{"memory", "memory.limit_in_bytes"}, {"pids", "pids.max"}} {
		out[f[1]] = v.file(f[0], path, f[1])
	}
	return out
}

// scopes lists the cri-containerd-*.scope cgroups in a slice (memory
// hierarchy).
func (v *sdView) scopes(path string) []string {
	entries, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup/memory", v.sd.CgroupBase, path))
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "cri-containerd-") && strings.HasSuffix(e.Name(), ".scope") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// sdRun is one agent's run of the pods: the slices it made, keyed by
// "kubepods", the QoS tiers and the pods' names.
type sdRun map[string]map[string]string

// runSDPods creates the pods on node, checks their slices and scopes
// against sdWant, records every slice, deletes the pods and waits for
// their slices to go.
func runSDPods(t *testing.T, v *sdView, e *env, node string) sdRun {
	t.Helper()
	client := e.client.CoreV1().Pods("default")
	for _, p := range sdPods() {
		p.Name = node + "-" + p.Name
		p.Namespace, p.Spec.NodeName = "default", node
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		if _, err := client.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := sdRun{}
	slices := map[string]string{}
	for _, want := range sdPods() {
		name := node + "-" + want.Name
		p := e.waitPod(t, name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		path := sdSlice(p)
		slices[name] = path
		got := v.slice(path)
		t.Logf("%s: %s %v", node, path, got)
		run[want.Name] = got
		w := sdWant[want.Name]
		quotaPerSec := w.quotaPerSec
		if quotaPerSec == "" {
			quotaPerSec = "18446744073709551615" // infinity
		}
		memory, memFile := w.memory, w.memory
		if memory == "" {
			memory, memFile = "18446744073709551615", "9223372036854771712"
		}
		for k, val := range map[string]string{
			"ActiveState": "active", "CPUShares": w.shares, "cpu.shares": w.shares,
			"cpu.cfs_quota_us": w.quota, "CPUQuotaPerSecUSec": quotaPerSec,
			"MemoryLimit": memory, "memory.limit_in_bytes": memFile,
			"TasksMax": fmt.Sprint(sdPodsLimit), "pids.max": fmt.Sprint(sdPodsLimit),
			"Slice": filepath.Base(filepath.Dir(path)),
		} {
			if got[k] != val {
				t.Errorf("%s: %s %s = %q, want %q", node, path, k, got[k], val)
			}
		}
		// The sandbox and the container, each in a scope of the pod's
		// slice that systemd runs.
		id := containerIDOf(p, "app")
		scope := "cri-containerd-" + id + ".scope"
		if sc := v.scopes(path); len(sc) != 2 || !contains(sc, scope) {
			t.Errorf("%s: %s holds scopes %q, want the sandbox's and %s", node, path, sc, scope)
		} else {
			if s := v.prop(scope, "Scope", "Slice"); s != filepath.Base(path) {
				t.Errorf("%s: %s is in %s, want %s", node, scope, s, filepath.Base(path))
			}
			if s := v.state(scope); s != "active" {
				t.Errorf("%s: %s is %s", node, scope, s)
			}
			if w.memory != "" {
				if got := v.file("memory", path+"/"+scope, "memory.limit_in_bytes"); got != w.memory {
					t.Errorf("%s: container %s memory.limit_in_bytes = %s, want %s", node, scope, got, w.memory)
				}
			}
		}
	}
	for _, s := range []string{"/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice", "/kubepods.slice/kubepods-besteffort.slice"} {
		run[filepath.Base(s)] = v.slice(s)
	}
	// kubepods: the node's CPUs, and its task limit as the agent (in the
	// PID namespace) reads it: the smaller of pid_max and threads-max.
	if got, want := run["kubepods.slice"]["cpu.shares"], fmt.Sprint(runtime.NumCPU()*1024); got != want {
		t.Errorf("%s: kubepods.slice cpu.shares = %s, want %s", node, got, want)
	}
	if got, want := run["kubepods.slice"]["TasksMax"], v.maxPIDs(); got != want {
		t.Errorf("%s: kubepods.slice TasksMax = %s, want %s (min of pid_max and threads-max)", node, got, want)
	}
	if got := run["kubepods-besteffort.slice"]["cpu.shares"]; got != "2" {
		t.Errorf("%s: kubepods-besteffort.slice cpu.shares = %s, want 2", node, got)
	}
	if got := run["kubepods-burstable.slice"]["cpu.shares"]; got != "102" {
		t.Errorf("%s: kubepods-burstable.slice cpu.shares = %s, want 102 (the burstable pod's 100m)", node, got)
	}
	for _, p := range sdPods() {
		if err := client.Delete(t.Context(), node+"-"+p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, path := range slices {
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			return v.state(filepath.Base(path)) == "inactive" && !v.exists("memory", path) && !v.exists("cpu", path) && !v.exists("pids", path), nil
		})
		if err != nil {
			t.Errorf("%s: the slice %s of deleted pod %s is still there (%s)", node, path, name, v.state(filepath.Base(path)))
		}
	}
	return run
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// startSDSystemd starts the private systemd and returns it with the
// command prefix that enters its namespaces; it is stopped last (its
// cleanup is registered first).
func startSDSystemd(t *testing.T) (*localsystemd.Systemd, []string) {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		// The slices' files are read from the v1 hierarchies.
		agenttest.RequireIntegration(t, "cgroup v1 memory hierarchy", err)
	}
	dir, err := os.MkdirTemp("", "nksd")
	if err != nil {
		t.Fatal(err)
	}
	// Registered before StartSystemd's, so it runs after systemd stopped:
	// nothing of its namespace is mounted on the host.
	t.Cleanup(func() {
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), dir) {
			t.Errorf("mounts below %s left after systemd stopped", dir)
		}
		_ = os.RemoveAll(dir)
	})
	sd := agenttest.StartSystemd(t, localsystemd.Config{Dir: dir})
	enter, err := sd.Enter()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(systemdBusEnv, sd.BusAddress)
	return sd, enter
}

// stopSlices stops kubepods.slice (and so every slice below it), so that
// the next agent makes them afresh.
func stopSlices(t *testing.T, v *sdView) {
	t.Helper()
	ch := make(chan string, 1)
	if _, err := v.conn.StopUnitContext(t.Context(), "kubepods.slice", "replace", ch); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if r != "done" {
			t.Fatalf("stop kubepods.slice: %s", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stop kubepods.slice: no result within 30s")
	}
}

// startSDAgent starts the private systemd, containerd of version in its
// namespaces with SystemdCgroup = true, and fullagent there too, with
// cgroupRoot "/", the given cgroupDriver and the extra configuration
// lines, and runs the pods on it.
func startSDAgent(t *testing.T, version, driver string, extra ...string) (*sdView, *procEnv, []string, sdRun) {
	t.Helper()
	sd, enter := startSDSystemd(t)
	v := newSDView(t, sd)
	e := startProcEnvOpts(t, procEnvOptions{
		cgroupRoot: "/", wrap: enter,
		config: fmt.Sprintf("cgroupDriver: %s\npodPidsLimit: %d\n", driver, sdPodsLimit) + strings.Join(extra, ""),
		cri: []agenttest.ContainerdOption{agenttest.WithContainerdVersion(version),
			agenttest.WithSystemd(enter, sd.BusAddress)},
	})
	t.Cleanup(func() { stopWrappedAgent(t, e.agent) })
	if version == agenttest.ContainerdVersion2 {
		e.agent.waitLog(60*time.Second, "Using the cgroup driver the container runtime reports", `cgroupDriver="systemd"`)
	}
	return v, e, enter, runSDPods(t, v, e.env, testNode)
}

// runSDKubelet runs upstream kubelet v1.37.2 as node sd-kubelet on the
// systemd and containerd of e (containerd 2: kubelet takes systemd from
// the CRI), with the same configuration lines as the agent (podPidsLimit
// and extra), and runs the pods on it.
func runSDKubelet(t *testing.T, v *sdView, e *procEnv, enter []string, extra string) sdRun {
	t.Helper()
	kubeletBin := findKubelet(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	gw := e.cri.Gateway.String()
	conf := kubeletconf.Common(kubeletconf.Node{
		PodLogsDir: filepath.Join(dir, "logs"), RuntimeEndpoint: e.cri.Endpoint, Address: gw,
		ClientCAFile: e.cp.CAFile, HealthzAddress: gw,
		Extra: fmt.Sprintf("podPidsLimit: %d\n", sdPodsLimit) + extra,
	}) + kubeletconf.KubeletOnly("")
	config := filepath.Join(dir, "kubelet.yaml")
	writeFile(t, config, conf)
	const node = "sd-kubelet"
	args := append(kubeletconf.Args(e.cp.NodeKubeconfig(node), config, node, gw, root), "-v=2")
	k := newAgentProcess(t, kubeletBin, filepath.Join(dir, "kubelet.log"), args)
	k.wrap = enter
	k.start()
	t.Cleanup(func() { stopWrappedAgent(t, k) })
	k.waitLog(60*time.Second, "Using cgroup driver setting received from the CRI runtime", `cgroupDriver="systemd"`)
	return runSDPods(t, v, e.env, node)
}

// TestSystemdCgroupDriverContainerd16: containerd 1.6 does not report its
// driver, so cgroupDriver: systemd is configured; the same slices.
func TestSystemdCgroupDriverContainerd16(t *testing.T) {
	startSDAgent(t, agenttest.ContainerdVersion16, "systemd")
}

// TestSystemdCgroupDriverPods: containerd 2 reports the systemd driver
// and the agent, configured with cgroupfs, follows it; then kubelet
// v1.37.2 runs the same pods on the same systemd and containerd.
func TestSystemdCgroupDriverPods(t *testing.T) {
	v, e, enter, ours := startSDAgent(t, agenttest.ContainerdVersion2, "cgroupfs")
	stopWrappedAgent(t, e.agent)
	if t.Failed() {
		return
	}
	stopSlices(t, v)
	theirs := runSDKubelet(t, v, e, enter, "")
	for _, key := range []string{"kubepods.slice", "kubepods-burstable.slice", "kubepods-besteffort.slice", "guaranteed", "burstable", "besteffort"} {
		for prop, want := range theirs[key] {
			if got := ours[key][prop]; got != want {
				t.Errorf("%s %s: fullagent %q, kubelet v1.37.2 %q", key, prop, got, want)
			}
		}
		t.Logf("%s: %v", key, theirs[key])
	}
}
