package volumemgr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/volumemgrtest"
)

func TestNewChecksConfig(t *testing.T) {
	if _, err := volumemgr.New(volumemgr.Config{}); err == nil || !strings.Contains(err.Error(), "RootDir") {
		t.Fatalf("New without RootDir = %v", err)
	}
	dup := volumemgr.Config{RootDir: t.TempDir(), Plugins: []volumemgr.Plugin{fakePlugin{name: "x"}, fakePlugin{name: "x"}}}
	if _, err := volumemgr.New(dup); err == nil {
		t.Fatal("two plugins with one name accepted")
	}
}

// subPathPod has an emptyDir "data" mounted by container "app" three times:
// whole, with subPath, and with subPathExpr.
func subPathPod(sub, expr string) *v1.Pod {
	p := testPod("web", v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	c := &p.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "POD_NAME", Value: "web-0"}, {Name: "DIR", Value: "logs/$(POD_NAME)"}}
	c.VolumeMounts = append(c.VolumeMounts,
		v1.VolumeMount{Name: "data", MountPath: "/sub", SubPath: sub},
		v1.VolumeMount{Name: "data", MountPath: "/expr", SubPathExpr: expr})
	return p
}

func TestSubPathMounts(t *testing.T) {
	f := newFixture(t)
	pod := subPathPod("config/app.conf", "$(DIR)")
	f.mount(pod)
	vol := f.volumeDir(pod.UID, volumemgr.EmptyDirPluginName, "data")
	if err := os.MkdirAll(filepath.Join(vol, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "config", "app.conf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].HostPath != vol {
		t.Fatalf("whole volume at %s", ms[0].HostPath)
	}
	// subPath: a bind mount of the opened file, never VOLUME/SUBPATH itself.
	target := filepath.Join(f.podDir(pod.UID), "volume-subpaths", "data", "app", "1")
	if ms[1].HostPath != target || ms[1].ContainerPath != "/sub" {
		t.Fatalf("subPath mount = %+v, want host path %s", ms[1], target)
	}
	bind := f.mnt.Below(target)
	if len(bind) != 1 || bind[0].Type != "bind" || !strings.HasPrefix(bind[0].Source, fmt.Sprintf("/proc/%d/fd/", os.Getpid())) {
		t.Fatalf("subPath bind = %v", bind)
	}
	if info, err := os.Stat(target); err != nil || !info.Mode().IsRegular() {
		t.Fatalf("a file subPath needs a file target: %v", err)
	}
	// subPathExpr: expanded from the env, created (missing) with the
	// volume's mode.
	exprDir := filepath.Join(vol, "logs", "web-0")
	if m := fileMode(t, exprDir); !m.IsDir() || m.Perm() != 0o777 {
		t.Fatalf("subPathExpr dir %s mode %v", exprDir, m)
	}
	if ms[2].HostPath != filepath.Join(f.podDir(pod.UID), "volume-subpaths", "data", "app", "2") {
		t.Fatalf("subPathExpr mount = %+v", ms[2])
	}
	// A second call (container restart) reuses nothing stale: with the fake
	// mounter the target is not the source file, so it is bound again.
	if _, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if n := len(f.mnt.Below(filepath.Join(f.podDir(pod.UID), "volume-subpaths"))); n != 2 {
		t.Fatalf("%d subPath binds after a second call, want 2", n)
	}

	// Tearing the pod down removes the binds first, then the volume.
	f.m.RemovePod(pod.UID)
	f.reconcile()
	if left := f.mnt.Below(f.podDir(pod.UID)); len(left) != 0 {
		t.Fatalf("mounts left: %v", left)
	}
	for _, d := range []string{"volume-subpaths", "volumes", "plugins"} {
		if exists(filepath.Join(f.podDir(pod.UID), d)) {
			t.Errorf("%s left after teardown", d)
		}
	}
}

func TestSubPathEscapesAreRefused(t *testing.T) {
	f := newFixture(t)
	base := subPathPod("x", "x")
	f.mount(base)
	vol := f.volumeDir(base.UID, volumemgr.EmptyDirPluginName, "data")
	// What a malicious container can write into its volume.
	for link, target := range map[string]string{"evil": "/etc", "evil-file": "/etc/passwd", "up": strings.Repeat("../", 30), "inner": "safe"} {
		if err := os.Symlink(target, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(vol, "safe"), 0o755); err != nil {
		t.Fatal(err)
	}
	refused := `failed to prepare subPath for volumeMount "data" of container "app"`
	for _, tc := range []struct{ sub, err string }{
		{"evil", refused},
		{"evil-file", refused},
		{"evil/passwd", refused},
		{"up/etc", refused},
		{"evil/newdir", `failed to create subPath directory for volumeMount "data" of container "app"`},
		{"../x", "unable to provision SubPath `../x`: must not contain '..'"},
		{"/etc", "error SubPath `/etc` must not be an absolute path"},
		{"inner", ""}, // a symlink that stays inside the volume is fine
	} {
		t.Run(tc.sub, func(t *testing.T) {
			pod := subPathPod(tc.sub, "ok")
			before := len(f.mnt.Calls())
			_, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if fmt.Sprint(err) != tc.err {
				t.Fatalf("err = %v, want %s", err, tc.err)
			}
			for _, c := range f.mnt.Calls()[before:] {
				if strings.HasPrefix(c, "mount ") && strings.Contains(c, "/volume-subpaths/data/app/1") {
					t.Fatalf("refused subPath was mounted: %s", c)
				}
			}
		})
	}
	if exists("/etc/newdir") {
		t.Fatal("a directory was created outside the volume")
	}
	pod := subPathPod("x", "$(NOPE)")
	if _, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0]); fmt.Sprint(err) != "missing value for NOPE" {
		t.Fatalf("subPathExpr with an undefined variable: %v", err)
	}
}

func TestContainerMountsOptions(t *testing.T) {
	f := newFixture(t, func(c *volumemgr.Config) {
		c.ContainerEnv = func(context.Context, *v1.Pod, *v1.Container) ([]nodekit.EnvVar, error) {
			return []nodekit.EnvVar{{Name: "POD_NAME", Value: "from-resolver"}}, nil
		}
	})
	pod := subPathPod("a", "$(POD_NAME)")
	c := &pod.Spec.Containers[0]
	c.VolumeMounts[0].ReadOnly = true
	c.VolumeMounts[0].MountPropagation = ptr.To(v1.MountPropagationHostToContainer)
	f.mount(pod)
	ms, err := f.m.ContainerMounts(f.ctx, pod, c)
	if err != nil {
		t.Fatal(err)
	}
	if !ms[0].ReadOnly || *ms[0].Propagation != v1.MountPropagationHostToContainer || ms[1].ReadOnly || ms[1].Propagation != nil {
		t.Fatalf("mounts = %+v", ms)
	}
	if !exists(filepath.Join(f.volumeDir(pod.UID, volumemgr.EmptyDirPluginName, "data"), "from-resolver")) {
		t.Fatal("subPathExpr did not use Config.ContainerEnv")
	}
	if _, err := f.m.ContainerMountsWithEnv(f.ctx, pod, c, []nodekit.EnvVar{{Name: "POD_NAME", Value: "given"}}); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(f.volumeDir(pod.UID, volumemgr.EmptyDirPluginName, "data"), "given")) {
		t.Fatal("subPathExpr did not use the given env")
	}
	c.VolumeMounts[0].MountPropagation = ptr.To(v1.MountPropagationMode("Sideways"))
	if _, err := f.m.ContainerMounts(f.ctx, pod, c); fmt.Sprint(err) != `invalid MountPropagation mode: "Sideways"` {
		t.Fatalf("bad propagation: %v", err)
	}
	other := testPod("other", v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	if _, err := f.m.ContainerMounts(f.ctx, other, &other.Spec.Containers[0]); fmt.Sprint(err) != `cannot find volume "data" to mount into container "app"` {
		t.Fatalf("unmounted volume: %v", err)
	}
}

func TestReconcilerConvergesAndCleansUp(t *testing.T) {
	f := newFixture(t)
	f.objs.SetSecret(secret("s", map[string]string{"k": "v"}))
	vols := []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
	}
	a, b := testPod("a", vols...), testPod("b", vols...)
	f.mount(a)
	f.mount(b)
	if got := f.m.MountedVolumes(a.UID); len(got) != 3 || got[0].Name != "creds" || !got[0].ReadOnly || got[1].Plugin != volumemgr.EmptyDirPluginName {
		t.Fatalf("MountedVolumes = %+v", got)
	}
	if n := len(f.mnt.Below(f.podDir(a.UID))); n != 2 {
		t.Fatalf("pod a has %d mounts, want 2 tmpfs", n)
	}
	// A stable state does no work.
	calls := len(f.mnt.Calls())
	f.step(time.Second)
	if len(f.mnt.Calls()) != calls {
		t.Fatalf("an idle Reconcile mounted: %q", f.mnt.Calls()[calls:])
	}

	done := make(chan error, 1)
	go func() { done <- f.m.WaitForUnmount(f.ctx, a) }()
	// WaitForUnmount removed the pod; the next pass tears it down.
	for f.m.Reconcile(f.ctx); ; f.m.Reconcile(f.ctx) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			continue
		}
		break
	}
	if left := f.mnt.Below(f.podDir(a.UID)); len(left) != 0 {
		t.Fatalf("mounts left: %v", left)
	}
	if entries, _ := os.ReadDir(f.podDir(a.UID)); len(entries) != 0 {
		t.Fatalf("pod a dir holds %v", entries)
	}
	if n := len(f.mnt.Below(f.podDir(b.UID))); n != 2 || len(f.m.MountedVolumes(b.UID)) != 3 {
		t.Fatal("pod b was touched")
	}
	if len(f.m.MountedVolumes(a.UID)) != 0 {
		t.Fatal("pod a still reported")
	}
}

func TestTeardownNeverRemovesAMountedDirectory(t *testing.T) {
	f := newFixture(t)
	pod := testPod("web", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	f.mount(pod)
	dir := f.volumeDir(pod.UID, volumemgr.EmptyDirPluginName, "scratch")
	// Something (a Bidirectional mount made by the container) is mounted
	// inside the volume.
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.mnt.Add(volumemgr.MountPoint{Path: inner, Type: "ext4", Source: "/dev/sdb"})
	f.m.RemovePod(pod.UID)
	f.reconcile()
	if !exists(filepath.Join(inner, "precious")) {
		t.Fatal("teardown removed files of a mounted file system")
	}
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	err := f.m.WaitForUnmount(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "mounted volumes=[scratch]") || !strings.Contains(err.Error(), "is still mounted") {
		t.Fatalf("WaitForUnmount = %v", err)
	}
	// Once it is unmounted, the retry (after its back-off) removes the volume.
	if err := f.mnt.Unmount(f.ctx, inner); err != nil {
		t.Fatal(err)
	}
	f.step(time.Second)
	if exists(dir) || exists(f.podDir(pod.UID)+"/volumes") {
		t.Fatal("volume not removed after the mount went")
	}
}

func TestRestartAdoptsAndCleansVolumes(t *testing.T) {
	f := newFixture(t)
	f.objs.SetSecret(secret("s", map[string]string{"k": "v1"}))
	vols := []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
	}
	kept, gone := testPod("kept", vols...), testPod("gone", vols...)
	f.mount(kept)
	f.mount(gone)
	if err := os.WriteFile(filepath.Join(f.volumeDir(kept.UID, volumemgr.EmptyDirPluginName, "scratch"), "state"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	mountsBefore := len(f.mnt.Calls())

	// The agent restarts; the secret changed meanwhile.
	f.objs.SetSecret(secret("s", map[string]string{"k": "v2"}))
	f.m = f.restart()
	f.reconcile() // scan: nothing desired yet, nothing torn down
	if !exists(f.volumeDir(gone.UID, volumemgr.SecretPluginName, "creds")) || len(f.mnt.Below(f.podDir(gone.UID))) != 1 {
		t.Fatal("a volume was torn down before its pod was known to be gone")
	}
	f.mount(kept) // the pod worker syncs the running pod again
	if got := readFile(t, filepath.Join(f.volumeDir(kept.UID, volumemgr.EmptyDirPluginName, "scratch"), "state")); got != "keep me" {
		t.Fatalf("adopted emptyDir content = %q", got)
	}
	if got := readFile(t, filepath.Join(f.volumeDir(kept.UID, volumemgr.SecretPluginName, "creds"), "k")); got != "v2" {
		t.Fatalf("adopted secret = %q, want the current v2", got)
	}
	for _, c := range f.mnt.Calls()[mountsBefore:] {
		if strings.HasPrefix(c, "mount ") {
			t.Fatalf("adopting remounted: %s", c)
		}
	}
	if f.mounts(kept, 0)["creds"] == "" {
		t.Fatal("no mounts for the adopted pod")
	}

	// Housekeeping says which pods may still run: the other one goes.
	f.m.CleanupPods(map[types.UID]bool{kept.UID: true})
	f.reconcile()
	if left := f.mnt.Below(f.podDir(gone.UID)); len(left) != 0 {
		t.Fatalf("mounts of the gone pod left: %v", left)
	}
	if exists(filepath.Join(f.podDir(gone.UID), "volumes")) {
		t.Fatal("volumes of the gone pod left")
	}
	if len(f.mnt.Below(f.podDir(kept.UID))) != 1 || len(f.m.MountedVolumes(kept.UID)) != 2 {
		t.Fatal("the kept pod lost volumes")
	}
}

func TestRestartLeavesUnknownPluginsAlone(t *testing.T) {
	f := newFixture(t)
	csi := filepath.Join(f.podDir("old"), "volumes", "kubernetes.io~csi", "pv-1", "mount")
	if err := os.MkdirAll(csi, 0o755); err != nil {
		t.Fatal(err)
	}
	f.mnt.Add(volumemgr.MountPoint{Path: csi, Type: "ext4"})
	f.reconcile()
	f.m.CleanupPods(nil)
	f.reconcile()
	if len(f.mnt.Below(csi)) != 1 || !exists(csi) {
		t.Fatal("a volume of an unknown plugin was touched")
	}
}

// TestWaitForAttachAndMountTimesOut runs the real loop in a synctest bubble:
// a volume that never mounts fails the wait after the mount timeout, with
// the reason, and the events keep coming with back-off meanwhile.
func TestWaitForAttachAndMountTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig())))
		ev := &events{}
		m, err := volumemgr.New(volumemgr.Config{RootDir: t.TempDir(), Mounter: &volumemgrtest.Mounter{}, Events: ev, Objects: &volumemgrtest.Objects{}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		pod := testPod("web", v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "absent"}}}})
		start := time.Now()
		err = m.WaitForAttachAndMount(ctx, pod)
		want := `unmounted volumes=[cfg], unattached volumes=[], failed to process volumes=[]: context deadline exceeded; volume "cfg": configmap "absent" not found`
		if fmt.Sprint(err) != want {
			t.Fatalf("err = %v\nwant %s", err, want)
		}
		if waited := time.Since(start); waited != volumemgr.DefaultMountTimeout {
			t.Fatalf("waited %v", waited)
		}
		// 0, 0.5, 1.5, 3.5, ... 63.5 s, then every 2m2s: 8 attempts.
		if n := len(ev.all()); n != 8 {
			t.Fatalf("%d FailedMount events in the wait, want 8", n)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
	})
}

// fakePlugin is a vendor plugin: it handles hostPath volumes whose path
// starts with /vendor, before the built-in hostPath plugin.
type fakePlugin struct {
	name     string
	tornDown *[]string
}

func (p fakePlugin) Name() string { return p.name }
func (p fakePlugin) CanSupport(vol *v1.Volume) bool {
	return vol.HostPath != nil && strings.HasPrefix(vol.HostPath.Path, "/vendor")
}
func (p fakePlugin) SetUp(_ context.Context, req *volumemgr.SetUpRequest) (*volumemgr.SetUpResult, error) {
	if err := os.MkdirAll(req.Dir, 0o755); err != nil {
		return nil, err
	}
	return &volumemgr.SetUpResult{ReadOnly: true}, nil
}
func (p fakePlugin) TearDown(_ context.Context, req *volumemgr.TearDownRequest) error {
	*p.tornDown = append(*p.tornDown, req.VolumeName)
	return os.RemoveAll(req.Dir)
}

func TestVendorPlugin(t *testing.T) {
	var torn []string
	f := newFixture(t, func(c *volumemgr.Config) {
		c.Plugins = []volumemgr.Plugin{fakePlugin{name: "example.com/vendor", tornDown: &torn}}
	})
	pod := testPod("web", v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/vendor/x"}}})
	f.mount(pod)
	dir := filepath.Join(f.podDir(pod.UID), "volumes", "example.com~vendor", "v")
	ms, _ := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
	if ms[0].HostPath != dir || !ms[0].ReadOnly {
		t.Fatalf("vendor mount = %+v", ms[0])
	}
	f.m.RemovePod(pod.UID)
	f.reconcile()
	if fmt.Sprint(torn) != "[v]" || exists(dir) {
		t.Fatalf("torn down %v", torn)
	}
}

// namingPlugin is fakePlugin that names each volume's directory by the
// volume's host path's last element, as the CSI plugin names a claim's by
// its PV.
type namingPlugin struct {
	fakePlugin
	asked *int
}

func (p namingPlugin) VolumeDirName(_ context.Context, _ *v1.Pod, vol *v1.Volume) (string, error) {
	*p.asked++
	return filepath.Base(vol.HostPath.Path), nil
}

// TestDirNamer: a DirNamer plugin's volume is set up in, mounted from and
// torn down from the directory the plugin named (asked once); after a
// restart the volume found there is the pod's volume, set up again and not
// torn down while the pod runs.
func TestDirNamer(t *testing.T) {
	var torn []string
	asked := 0
	f := newFixture(t, func(c *volumemgr.Config) {
		c.Plugins = []volumemgr.Plugin{namingPlugin{fakePlugin{name: "example.com/vendor", tornDown: &torn}, &asked}}
	})
	pod := testPod("web", v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/vendor/pv-1"}}})
	f.mount(pod)
	dir := filepath.Join(f.podDir(pod.UID), "volumes", "example.com~vendor", "pv-1")
	if got := f.mounts(pod, 0)["v"]; got != dir || !exists(dir) {
		t.Fatalf("mount of v = %s (exists %v), want %s", got, exists(dir), dir)
	}
	if exists(filepath.Join(f.podDir(pod.UID), "volumes", "example.com~vendor", "v")) {
		t.Error("a directory named by the pod volume was made")
	}
	f.step(time.Minute)
	if asked != 1 {
		t.Errorf("VolumeDirName asked %d times, want once", asked)
	}

	f.m = f.restart()
	f.m.AddPod(pod)
	f.reconcile()
	if len(torn) != 0 {
		t.Fatalf("after the restart, torn down %v while the pod runs", torn)
	}
	if got := f.mounts(pod, 0)["v"]; got != dir {
		t.Fatalf("after the restart, mount of v = %s, want %s", got, dir)
	}
	f.m.RemovePod(pod.UID)
	f.reconcile()
	if fmt.Sprint(torn) != "[v]" || exists(dir) {
		t.Fatalf("torn down %v (dir left %v), want v once from %s", torn, exists(dir), dir)
	}
}
