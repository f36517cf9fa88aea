package cgroupmgr

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/agenttest"
)

// runcBundle writes an OCI bundle running busybox's sleep whose cgroup is
// cgroupsPath, in runc's systemd form ("slice:prefix:name").
func runcBundle(t *testing.T, runc, cgroupsPath string) string {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		agenttest.RequireIntegration(t, "busybox (busybox-static)", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(bin, "sleep")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	var spec map[string]any
	cfg := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	proc := spec["process"].(map[string]any)
	proc["args"], proc["terminal"] = []string{"/bin/sleep", "300"}, false
	spec["linux"].(map[string]any)["cgroupsPath"] = cgroupsPath
	if raw, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSystemdDriverRuncScope: the cgroup parent EnsurePod returns is what
// the runtime's systemd mode needs. containerd (internal/cri/server,
// getCgroupsPath) turns it into "<last slice>:cri-containerd:<id>" for
// runc; runc's systemd driver, run in the private systemd's namespaces
// with that path, puts the container in cri-containerd-<id>.scope inside
// the pod's slice, under the pod's limits, and DestroyPod, stopping the
// slice, kills the container.
func TestSystemdDriverRuncScope(t *testing.T) {
	v := realCgroups(t)
	runc, err := exec.LookPath("runc")
	if err != nil {
		agenttest.RequireIntegration(t, "runc", err)
	}
	sd := privateSystemd(t)
	if err := sd.command("true").Err; err != nil {
		agenttest.RequireIntegration(t, "nsenter", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(Config{
		Driver: DriverSystemd, CgroupsPerQOS: true, Capacity: rl("cpu", "2", "memory", "4Gi"),
		SystemdBus: sd.BusAddress, SystemdCgroupBase: sd.CgroupBase,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pod := podWith("c0ffee-1234", res(rl("memory", "32Mi"), rl("memory", "64Mi")))
	parent, err := m.EnsurePod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	const id = "ctr1"
	bundle := runcBundle(t, runc, path.Base(parent)+":cri-containerd:"+id)
	inNS := func(args ...string) *exec.Cmd { return sd.command(args[0], args[1:]...) }
	// The detached container keeps runc's stdio: a file, not a pipe the
	// test would wait on.
	logPath := filepath.Join(t.TempDir(), "runc.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	run := inNS(runc, "--systemd-cgroup", "run", "--bundle", bundle, "-d", id)
	run.Stdout, run.Stderr = logFile, logFile
	if err := run.Run(); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("runc run: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = inNS(runc, "--systemd-cgroup", "delete", "-f", id).Run() })

	scope := sd.CgroupBase + parent + "/cri-containerd-" + id + ".scope"
	procs := strings.Fields(readT(t, cgFile(v, "memory", scope, "cgroup.procs", "cgroup.procs")))
	if len(procs) != 1 {
		t.Fatalf("%s holds %q, want the container's process", scope, procs)
	}
	cg, err := os.ReadFile("/proc/" + procs[0] + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	// v1 names the cgroup per hierarchy, v2 once ("0::/path").
	inScope := []string{"memory", "cpu", "pids", "name=systemd"}
	if v == V2 {
		inScope = []string{""}
	}
	for _, c := range inScope {
		if !strings.Contains(string(cg), ":"+c+":"+scope+"\n") {
			t.Errorf("container not in %s for %q:\n%s", scope, c, cg)
		}
	}
	if got := readT(t, cgFile(v, "memory", sd.CgroupBase+parent, "memory.limit_in_bytes", "memory.max")); got != fmt.Sprint(64*mi) {
		t.Errorf("the container's pod slice has memory limit %s, want 64Mi", got)
	}
	if err := m.DestroyPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + procs[0]); err == nil {
		t.Errorf("container process %s still there after DestroyPod", procs[0])
	}
	left := []string{"memory", "cpu", "pids", "systemd"}
	if v == V2 {
		left = []string{""}
	}
	for _, c := range left {
		if dir := filepath.Join(defaultRoot, c, sd.CgroupBase+parent); exists(dir) {
			t.Errorf("%s left after DestroyPod", dir)
		}
	}
}
