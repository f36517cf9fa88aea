package csi_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/internal/selinux"
	"github.com/nodekit/nodekit/internal/selinux/selinuxtest"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

const (
	labelA = "system_u:object_r:container_file_t:s0:c1,c2"
	labelB = "system_u:object_r:container_file_t:s0:c3,c4"
)

// seLinuxManager is a Manager over a plugin of e's driver that sees host
// as the host's SELinux (nil: the real one), as both would in an agent.
func (e *env) seLinuxManager(host volumemgr.SELinux) (*volumemgr.Manager, *testingclock.FakeClock) {
	e.t.Helper()
	p, err := csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)), NodeName: nodeName, SELinux: host})
	if err != nil {
		e.t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	m, err := volumemgr.New(volumemgr.Config{RootDir: e.root, Plugins: []volumemgr.Plugin{p}, SELinux: host, Clock: clk})
	if err != nil {
		e.t.Fatal(err)
	}
	return m, clk
}

// newSELinuxEnv is newEnv for the SELinux tests, with the host they run
// against (selinuxtest.Enabled: the Fake, or the real host with
// $NODEKIT_SELINUX=host). On the real host the driver stages volumes on a
// tmpfs mounted with the mount flags it gets, so a context= option is a
// real context mount.
func newSELinuxEnv(t *testing.T, objs ...runtime.Object) (*env, selinuxtest.Host) {
	t.Helper()
	host := selinuxtest.Enabled(t)
	return newEnvWith(t, csitest.Options{StageTmpfs: selinuxtest.Real()}, objs...), host
}

// seLinuxMountEnv is newSELinuxEnv with the PV pv-1 (handle vol-1) bound
// to the claim "claim", of a driver with seLinuxMount: true.
func seLinuxMountEnv(t *testing.T) (*env, selinuxtest.Host) {
	t.Helper()
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	drv := csiDriver(storagev1.VolumeLifecyclePersistent)
	drv.Spec.SELinuxMount = ptr.To(true)
	return newSELinuxEnv(t, pvc, pv, drv)
}

// mountErr adds pod to m, reconciles once and returns what
// WaitForAttachAndMount says of it then (without waiting).
func (e *env) mountErr(m *volumemgr.Manager, pod *v1.Pod) error {
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	return m.WaitForAttachAndMount(ctx, pod)
}

// takeOver removes pod uid-1 from m and, once its back-off passed, sets
// p2 (uid-2, labelB) up, which must then have the volume pv-1 with its
// own label.
func (e *env) takeOver(m *volumemgr.Manager, clk *testingclock.FakeClock, p2 *v1.Pod) {
	e.t.Helper()
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	clk.Step(time.Minute)
	if ms := e.relabels(m, p2); len(ms) != 1 {
		e.t.Errorf("mounts of p2 = %+v", ms)
	}
	e.checkMount("uid-2", "pv-1", labelB)
}

// checkMount checks, on the real SELinux host only, the mount of pod
// uid's volume pv: mountinfo shows context="label" (no context at all
// when label is ""), and a file written there reads with label (the
// mount's own; any label without a context mount).
func (e *env) checkMount(uid, pv, label string) {
	e.t.Helper()
	if !selinuxtest.Real() {
		return
	}
	target := filepath.Join(volDir(e.root, uid, pv), "mount")
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		e.t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(mi)) {
		if f := strings.Fields(l); len(f) > 4 && f[4] == target {
			line = strings.TrimSpace(l)
		}
	}
	switch {
	case line == "":
		e.t.Errorf("%s is not mounted", target)
	case label == "" && strings.Contains(line, "context="):
		e.t.Errorf("%s is mounted with a context: %s", target, line)
	case label != "" && !strings.Contains(line, `context="`+label+`"`):
		e.t.Errorf("%s is not mounted with context %q: %s", target, label, line)
	}
	f := filepath.Join(target, "file-"+uid)
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	got, err := goselinux.FileLabel(f)
	if err != nil {
		e.t.Fatal(err)
	}
	if label != "" && got != label {
		e.t.Errorf("%s reads with label %q, want the mount's %q", f, got, label)
	}
	e.t.Logf("%s: label %q; %s", f, got, line)
}

func labeledPod(name, uid, level string) *v1.Pod {
	p := podWith(name, uid, pvcVolume("claim"))
	p.Spec.SecurityContext = &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Level: level}}
	return p
}

func (e *env) mountFlags() []string {
	e.t.Helper()
	lines, err := e.drv.MountFlags()
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatal(err)
	}
	return lines
}

func readJSON(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	return data
}

// relabels sets pod's volumes up and returns whether each of its first
// container's mounts asks the runtime to relabel.
func (e *env) relabels(m *volumemgr.Manager, pod *v1.Pod) []bool {
	e.t.Helper()
	if err := e.mountErr(m, pod); err != nil {
		e.t.Fatal(err)
	}
	ms, err := m.ContainerMounts(e.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]bool, 0, len(ms))
	for _, mt := range ms {
		out = append(out, mt.SELinuxRelabel)
	}
	return out
}

// TestSELinuxMount: on an SELinux host, a PV of a driver with
// seLinuxMount: true is staged and published with context="LABEL" (the
// pod's label), recorded in both vol_data.json files as upstream, and not
// relabeled by the runtime; a second pod with another label fails with
// upstream's message and is never published. On the real host
// ($NODEKIT_SELINUX=host) the driver's mount has that context and the
// files in it that label.
func TestSELinuxMount(t *testing.T) {
	e, host := seLinuxMountEnv(t)
	m, clk := e.seLinuxManager(host)
	p1 := labeledPod("p1", "uid-1", "s0:c1,c2")
	if ms := e.relabels(m, p1); !slices.Equal(ms, []bool{false}) {
		t.Errorf("mounts of p1 = %+v, want one not relabeled (mounted with a context)", ms)
	}
	e.checkMount("uid-1", "pv-1", labelA)
	ctxOpt := `context="` + labelA + `"`
	if got, want := e.mountFlags(), []string{"NodeStageVolume vol-1 " + ctxOpt, "NodePublishVolume vol-1 " + ctxOpt}; !slices.Equal(got, want) {
		t.Errorf("mount flags the driver got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	staging := filepath.Join(e.root, stagingRel("vol-1"))
	for _, f := range []string{filepath.Join(volDir(e.root, "uid-1", "pv-1"), "vol_data.json"), filepath.Join(filepath.Dir(staging), "vol_data.json")} {
		if got := readJSON(t, f)["seLinuxMountContext"]; got != labelA {
			t.Errorf("%s: seLinuxMountContext = %q, want %q", f, got, labelA)
		}
	}

	p2 := labeledPod("p2", "uid-2", "s0:c3,c4")
	err := e.mountErr(m, p2)
	if want := `conflicting SELinux labels of volume pv-1: "` + labelA + `" and "` + labelB + `"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("p2: %v, want %q", err, want)
	}
	if slices.Contains(e.calls(), "NodePublishVolume vol-1 pods/uid-2/volumes/kubernetes.io~csi/pv-1/mount") {
		t.Error("p2 was published despite the conflict")
	}

	// Once p1 is gone, p2's label is the volume's (at its next attempt).
	e.takeOver(m, clk, p2)
	if got := e.mountFlags(); len(got) != 4 || got[3] != `NodePublishVolume vol-1 context="`+labelB+`"` {
		t.Errorf("mount flags after p2: %q", got)
	}
	m.RemovePod("uid-2")
	m.Reconcile(e.ctx)
}

// TestSELinuxNoContextMount: no context= option where the driver has no
// seLinuxMount, where the pod asks for Recursive relabeling, or on a host
// without SELinux (the real detector, where this host has none); the
// runtime then relabels a writable volume only on a file system with
// seclabel where SELinux is enabled, as upstream. On the real SELinux
// host the driver's mount has no context, and the real detector's case
// is a context mount.
func TestSELinuxNoContextMount(t *testing.T) {
	for _, tc := range []struct {
		name         string
		seLinuxMount bool
		host         func(testing.TB) selinuxtest.Host // nil: the real detector
		recursive    bool
		relabel      bool
	}{
		{name: "driver without seLinuxMount", host: selinuxtest.Enabled, relabel: true},
		{name: "Recursive", seLinuxMount: true, host: selinuxtest.Enabled, recursive: true, relabel: true},
		{name: "no seclabel", host: func(testing.TB) selinuxtest.Host { return selinux.Fake{Seclabel: []string{"/nowhere"}} }},
		{name: "this host", seLinuxMount: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
			drv := csiDriver(storagev1.VolumeLifecyclePersistent)
			drv.Spec.SELinuxMount = ptr.To(tc.seLinuxMount)
			var host volumemgr.SELinux
			if tc.host != nil {
				host = tc.host(t)
			}
			// The real detector on an SELinux host: a context mount.
			label := ""
			if tc.host == nil && (selinux.Host{}).Enabled() {
				label = labelA
			}
			e := newEnvWith(t, csitest.Options{StageTmpfs: selinuxtest.Real()}, pvc, pv, drv)
			m, _ := e.seLinuxManager(host)
			p := labeledPod("p1", "uid-1", "s0:c1,c2")
			if tc.recursive {
				p.Spec.SecurityContext.SELinuxChangePolicy = ptr.To(v1.SELinuxChangePolicyRecursive)
			}
			if ms := e.relabels(m, p); !slices.Equal(ms, []bool{tc.relabel}) {
				t.Errorf("mounts = %+v, want one with relabel %v", ms, tc.relabel)
			}
			got := e.mountFlags()
			switch {
			case label == "" && len(got) != 0:
				t.Errorf("driver got mount flags %q", got)
			case label != "" && len(got) != 2:
				t.Errorf("driver got mount flags %q, want context=%q twice", got, label)
			}
			if got := readJSON(t, filepath.Join(volDir(e.root, "uid-1", "pv-1"), "vol_data.json"))["seLinuxMountContext"]; got != label {
				t.Errorf("vol_data.json has seLinuxMountContext %q, want %q", got, label)
			}
			e.checkMount("uid-1", "pv-1", label)
			m.RemovePod("uid-1")
			m.Reconcile(e.ctx)
		})
	}
}

// TestSELinuxLabelForgottenOnFailure: a pod whose set-up failed before its
// publish holds no label on the volume once it is gone, so a pod with
// another label sets it up.
func TestSELinuxLabelForgottenOnFailure(t *testing.T) {
	e, host := seLinuxMountEnv(t)
	m, clk := e.seLinuxManager(host)
	if err := e.drv.Fail("NodeStageVolume", "Internal"); err != nil {
		t.Fatal(err)
	}
	p1 := labeledPod("p1", "uid-1", "s0:c1,c2")
	m.AddPod(p1)
	m.Reconcile(e.ctx)
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	if err := e.drv.Recover(); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	m.Reconcile(e.ctx)
	if ms := e.relabels(m, labeledPod("p2", "uid-2", "s0:c3,c4")); len(ms) != 1 {
		t.Errorf("mounts of p2 = %+v", ms)
	}
	e.checkMount("uid-2", "pv-1", labelB)
	m.RemovePod("uid-2")
	m.Reconcile(e.ctx)
	clk.Step(time.Minute)
	m.Reconcile(e.ctx)
}

// TestSELinuxMountAfterRestart: after a restart (new plugin and manager
// over the same root), a volume still staged with one pod's context is
// not published for a pod with another label that comes first: upstream
// finds the staged context in vol_data.json (its reconstructed actual
// state) and the pod waits with upstream's message; the pod that has the
// volume's label sets it up again. Before, the second pod was published
// onto the mount of the first's context (its files read with the first
// pod's label on a real host).
func TestSELinuxMountAfterRestart(t *testing.T) {
	e, host := seLinuxMountEnv(t)
	m1, _ := e.seLinuxManager(host)
	p1 := labeledPod("p1", "uid-1", "s0:c1,c2")
	e.relabels(m1, p1)
	e.checkMount("uid-1", "pv-1", labelA)

	// Restart: new plugin, new manager; the pod with the other label is
	// added first.
	m2, clk := e.seLinuxManager(host)
	p2 := labeledPod("p2", "uid-2", "s0:c3,c4")
	err := e.mountErr(m2, p2)
	want := `waiting for unmount of volume "kubernetes.io/csi/` + driverName + `^vol-1", because it is already mounted to a different pod with a different SELinux label`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("p2 after the restart: %v, want %q", err, want)
	}
	if slices.Contains(e.calls(), "NodePublishVolume vol-1 pods/uid-2/volumes/kubernetes.io~csi/pv-1/mount") {
		t.Error("p2 was published onto the volume staged with p1's context")
		e.checkMount("uid-2", "pv-1", labelB)
	}
	if ms := e.relabels(m2, p1); len(ms) != 1 {
		t.Errorf("mounts of p1 after the restart = %+v", ms)
	}
	e.checkMount("uid-1", "pv-1", labelA)

	// Once p1 is gone, the volume is unstaged and p2 gets its label.
	e.takeOver(m2, clk, p2)
	m2.RemovePod("uid-2")
	m2.Reconcile(e.ctx)
}
