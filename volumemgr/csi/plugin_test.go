package csi_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/volumemgr"
)

type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) Eventf(_ runtime.Object, typ, reason, format string, args ...interface{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, typ+" "+reason+" "+fmt.Sprintf(format, args...))
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

func (e *env) manager(clk *testingclock.FakeClock, ev *events) *volumemgr.Manager {
	e.t.Helper()
	m, err := volumemgr.New(volumemgr.Config{RootDir: e.root, Plugins: []volumemgr.Plugin{e.plugin}, Clock: clk, Events: ev})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func pvcVolume(claim string) v1.Volume {
	return v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func stagingRel(handle string) string {
	return fmt.Sprintf("plugins/kubernetes.io/csi/%s/%x/globalmount", driverName, sha256.Sum256([]byte(handle)))
}

func TestPVCStagePublishTeardown(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	m := e.manager(testingclock.NewFakeClock(time.Now()), &events{})
	p1, p2 := podWith("p1", "uid-1", pvcVolume("claim")), podWith("p2", "uid-2", pvcVolume("claim"))
	m.AddPod(p1)
	m.AddPod(p2)
	m.Reconcile(e.ctx)

	target1 := filepath.Join(volDir(e.root, "uid-1", "pv-1"), "mount")
	staging := filepath.Join(e.root, stagingRel("vol-1"))
	if mv := m.MountedVolumes("uid-1"); len(mv) != 1 || mv[0].Path != target1 || mv[0].Plugin != "kubernetes.io/csi" {
		t.Fatalf("mounted volumes of p1: %+v", mv)
	}
	for _, p := range []string{staging, target1, filepath.Join(volDir(e.root, "uid-2", "pv-1"), "mount")} {
		if !isMounted(t, p) {
			t.Errorf("%s is not in /proc/self/mountinfo", p)
		}
	}
	// One stage for the node, one publish per pod (in either order).
	calls := e.calls()
	want := []string{
		"NodeStageVolume vol-1 " + stagingRel("vol-1"),
		"NodePublishVolume vol-1 pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount",
		"NodePublishVolume vol-1 pods/uid-2/volumes/kubernetes.io~csi/pv-1/mount",
	}
	if len(calls) != 3 || calls[0] != want[0] || !slices.Contains(calls, want[1]) || !slices.Contains(calls, want[2]) {
		t.Errorf("driver calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	// The pods share the driver's directory for the volume.
	if err := os.WriteFile(filepath.Join(target1, "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(volDir(e.root, "uid-2", "pv-1"), "mount", "f")); err != nil || string(b) != "hello" {
		t.Errorf("p2 reads %q, %v", b, err)
	}
	var data map[string]string
	b, err := os.ReadFile(filepath.Join(volDir(e.root, "uid-1", "pv-1"), "vol_data.json"))
	if err == nil {
		err = json.Unmarshal(b, &data)
	}
	if err != nil || data["driverName"] != driverName || data["volumeHandle"] != "vol-1" || data["specVolID"] != "pv-1" ||
		data["volumeLifecycleMode"] != "Persistent" || data["nodeName"] != nodeName || !strings.HasPrefix(data["attachmentID"], "csi-") {
		t.Errorf("vol_data.json: %s, %v", b, err)
	}

	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	if got := e.calls()[3:]; !slices.Equal(got, []string{"NodeUnpublishVolume vol-1 pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"}) {
		t.Errorf("after p1 left: %v, want only its unpublish", got)
	}
	if !isMounted(t, staging) {
		t.Error("staging unmounted while p2 still uses the volume")
	}
	m.RemovePod("uid-2")
	m.Reconcile(e.ctx)
	if got := e.calls()[4:]; !slices.Equal(got, []string{
		"NodeUnpublishVolume vol-1 pods/uid-2/volumes/kubernetes.io~csi/pv-1/mount",
		"NodeUnstageVolume vol-1 " + stagingRel("vol-1"),
	}) {
		t.Errorf("after p2 left: %v, want its unpublish then the unstage", got)
	}
	if left := mountsUnder(t, e.root); len(left) > 0 {
		t.Errorf("mounts left: %v", left)
	}
	for _, d := range []string{volDir(e.root, "uid-1", "pv-1"), filepath.Dir(staging)} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is left behind (%v)", d, err)
		}
	}
}

func TestPublishFailureEventAndRetry(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	clk := testingclock.NewFakeClock(time.Now())
	ev := &events{}
	m := e.manager(clk, ev)
	if err := e.drv.Fail("NodePublishVolume", "Internal"); err != nil {
		t.Fatal(err)
	}
	pod := podWith("p", "uid-1", pvcVolume("claim"))
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	want := `Warning FailedMount MountVolume.SetUp failed for volume "pv-1" : rpc error: code = Internal desc = injected failure of NodePublishVolume`
	if got := ev.all(); !slices.Equal(got, []string{want}) {
		t.Errorf("events %q, want %q", got, want)
	}
	if len(m.MountedVolumes("uid-1")) != 0 {
		t.Error("volume mounted although the publish failed")
	}
	target := filepath.Join(volDir(e.root, "uid-1", "pv-1"), "mount")
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("failed publish left %s (%v)", target, err)
	}
	// Back-off: no new attempt before it passes.
	m.Reconcile(e.ctx)
	if n := len(e.calls()); n != 2 {
		t.Errorf("%d calls before the back-off passed, want 2 (stage, publish): %v", n, e.calls())
	}
	if err := e.drv.Recover(); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	m.Reconcile(e.ctx)
	if mv := m.MountedVolumes("uid-1"); len(mv) != 1 || !isMounted(t, target) {
		t.Fatalf("after recovery: mounted %+v, target mounted %v", mv, isMounted(t, target))
	}
	if got := e.calls(); len(got) != 3 || !strings.HasPrefix(got[2], "NodePublishVolume") {
		t.Errorf("retry calls %v, want the staged volume only published again", got)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}

// TestStageFailureEvent: a failed NodeStageVolume is upstream's
// MountDevice step of the claim's PV in the FailedMount event.
func TestStageFailureEvent(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	m := e.manager(testingclock.NewFakeClock(time.Now()), ev)
	if err := e.drv.Fail("NodeStageVolume", "Internal"); err != nil {
		t.Fatal(err)
	}
	m.AddPod(podWith("p", "uid-1", pvcVolume("claim")))
	m.Reconcile(e.ctx)
	want := `Warning FailedMount MountVolume.MountDevice failed for volume "pv-1" : rpc error: code = Internal desc = injected failure of NodeStageVolume`
	if got := ev.all(); !slices.Equal(got, []string{want}) {
		t.Errorf("events %q, want %q", got, want)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}

func TestInlineVolume(t *testing.T) {
	e := newEnv(t, csiDriver(storagev1.VolumeLifecycleEphemeral))
	m := e.manager(testingclock.NewFakeClock(time.Now()), &events{})
	ro := true
	vol := v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driverName, ReadOnly: &ro}}}
	pod := podWith("p", "uid-1", vol)
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	mv := m.MountedVolumes("uid-1")
	if len(mv) != 1 || !mv[0].ReadOnly {
		t.Fatalf("mounted %+v, want one read-only volume", mv)
	}
	handle := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("uid-1inline")))
	if got := e.calls(); !slices.Equal(got, []string{"NodePublishVolume " + handle + " pods/uid-1/volumes/kubernetes.io~csi/inline/mount"}) {
		t.Errorf("calls %v, want one publish without staging", got)
	}
	if err := os.WriteFile(filepath.Join(mv[0].Path, "x"), nil, 0o644); err == nil {
		t.Error("wrote into a read-only inline volume")
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	if got := e.calls(); len(got) != 2 || got[1] != "NodeUnpublishVolume "+handle+" pods/uid-1/volumes/kubernetes.io~csi/inline/mount" {
		t.Errorf("calls %v, want the unpublish", got)
	}
	if _, err := os.Stat(filepath.Join(e.drv.StateDir, "volumes", handle)); !os.IsNotExist(err) {
		t.Errorf("the driver kept the inline volume's data (%v)", err)
	}
}
