package csi_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// TestAttachRequired walks an attachRequired volume through the contract
// with the attach/detach controller: it is reported in use before anything
// else, held until the node status lists it, then until
// status.volumesAttached lists it (no event: upstream's
// VerifyControllerAttachedVolume), then until its VolumeAttachment says
// attached (FailedMount "MountVolume.WaitForAttach failed", with the
// attacher's error when it has one), and is staged and published with the
// attachment's metadata as publish context; torn down, it leaves
// VolumesInUse.
func TestAttachRequired(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-a", "vol-a")
	drvObj := csiDriver(storagev1.VolumeLifecyclePersistent)
	drvObj.Spec.AttachRequired = ptr.To(true)
	e := newEnv(t, pvc, pv, drvObj)
	var err error
	e.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)),
		NodeName: nodeName, Attach: csi.AttachFromClient(clientgo.Wrap(e.cs))})
	if err != nil {
		t.Fatal(err)
	}
	clk, ev := testingclock.NewFakeClock(time.Now()), &events{}
	m := e.manager(clk, ev)
	pod := podWith("p", "uid-a", pvcVolume("claim"))
	m.AddPod(pod)
	step := func() { clk.Step(3 * time.Second); m.Reconcile(e.ctx) }
	m.Reconcile(e.ctx)

	name := v1.UniqueVolumeName("kubernetes.io/csi/" + driverName + "^vol-a")
	if got := m.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{name}) {
		t.Fatalf("VolumesInUse = %v, want [%s]", got, name)
	}
	m.MarkVolumesAsReportedInUse([]v1.UniqueVolumeName{name})
	step()
	if c := e.calls(); len(c) != 0 || len(ev.all()) != 0 {
		t.Fatalf("before volumesAttached: calls %q, events %q", c, ev.all())
	}

	node, err := e.cs.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.VolumesAttached = []v1.AttachedVolume{{Name: name, DevicePath: ""}}
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vaName := attachID("vol-a", driverName, nodeName)
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: vaName}, Spec: storagev1.VolumeAttachmentSpec{
		Attacher: driverName, NodeName: nodeName, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-a")}}}
	if _, err := e.cs.StorageV1().VolumeAttachments().Create(e.ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	step()
	want := fmt.Sprintf(`Warning FailedMount MountVolume.WaitForAttach failed for volume "pv-a" : volume vol-a is not attached for volume attachment %s`, vaName)
	if got := ev.all(); len(got) != 1 || got[0] != want {
		t.Fatalf("events %q, want %q", got, want)
	}

	va.Status.AttachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = no disk"}
	if _, err := e.cs.StorageV1().VolumeAttachments().UpdateStatus(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Second)
	m.Reconcile(e.ctx)
	if got := ev.all(); len(got) != 2 || !strings.HasSuffix(got[1], `"pv-a" : rpc error: code = Internal desc = no disk`) {
		t.Fatalf("events %q, want the attach error last", got)
	}

	va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"devicePath": "/dev/fake0"}}
	if _, err := e.cs.StorageV1().VolumeAttachments().UpdateStatus(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	m.Reconcile(e.ctx)
	if mv := m.MountedVolumes("uid-a"); len(mv) != 1 {
		t.Fatalf("not mounted once attached; calls %q events %q", e.calls(), ev.all())
	}
	pc, err := e.drv.PublishContexts()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pc, []string{"NodeStageVolume vol-a devicePath=/dev/fake0", "NodePublishVolume vol-a devicePath=/dev/fake0"}) {
		t.Errorf("publish contexts %q", pc)
	}

	m.RemovePod("uid-a")
	m.Reconcile(e.ctx)
	if got := m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse after tear-down = %v", got)
	}
	if c := e.calls(); !slices.ContainsFunc(c, func(s string) bool { return strings.HasPrefix(s, "NodeUnstageVolume vol-a") }) {
		t.Errorf("calls %q, want NodeUnstageVolume", c)
	}
}

// TestAttachableName: only persistent volumes of drivers that require
// attachment are named, and only with an AttachAPI; a volume found on disk
// is named from its vol_data.json.
func TestAttachableName(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-n", "vol-n")
	e := newEnv(t, pvc, pv) // no CSIDriver object: attach required
	pod := podWith("p", "uid-n", pvcVolume("claim"))
	vol := pvcVolume("claim")
	if n, err := e.plugin.AttachableName(e.ctx, &volumemgr.AttachableRequest{Pod: pod, Volume: &vol}); err != nil || n != "" {
		t.Fatalf("without AttachAPI: %q, %v", n, err)
	}
	p, err := csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)),
		NodeName: nodeName, Attach: csi.AttachFromClient(clientgo.Wrap(e.cs))})
	if err != nil {
		t.Fatal(err)
	}
	want := csi.UniqueVolumeName(driverName, "vol-n")
	if want != "kubernetes.io/csi/csi.nodekit.test^vol-n" {
		t.Fatalf("UniqueVolumeName = %s", want)
	}
	if n, err := p.AttachableName(e.ctx, &volumemgr.AttachableRequest{Pod: pod, Volume: &vol}); err != nil || n != want {
		t.Fatalf("AttachableName = %q, %v", n, err)
	}
	dir := volDir(e.root, "uid-n", "data")
	writeVolData(t, dir, map[string]string{"driverName": driverName, "volumeHandle": "vol-n", "volumeLifecycleMode": "Persistent"})
	if n, err := p.AttachableName(e.ctx, &volumemgr.AttachableRequest{Dir: dir}); err != nil || n != want {
		t.Fatalf("AttachableName from disk = %q, %v", n, err)
	}
	writeVolData(t, dir, map[string]string{"driverName": driverName, "volumeHandle": "csi-x", "volumeLifecycleMode": "Ephemeral"})
	if n, err := p.AttachableName(e.ctx, &volumemgr.AttachableRequest{Dir: dir}); err != nil || n != "" {
		t.Fatalf("inline volume from disk = %q, %v", n, err)
	}
}

// attachID is upstream's VolumeAttachment name, written out here.
func attachID(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

func writeVolData(t *testing.T, dir string, data map[string]string) {
	t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vol_data.json"), b, 0o640); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(filepath.Dir(filepath.Dir(dir)))) })
}
