package csi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// TestClaimDirNamedByPV: a claim's volume directory is named by its PV
// (upstream's volume spec name), an inline volume's by the pod volume;
// after a restart (new plugin and manager, as when nodekit takes over a
// node from kubelet) the volume found in the PV's directory is the pod's:
// published again at the same target, never unpublished while the pod
// runs, and torn down once, from there, when the pod goes.
func TestClaimDirNamedByPV(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral))
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, &events{})
	pod := podWith("p1", "uid-1", pvcVolume("claim"))
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	target := filepath.Join(volDir(e.root, "uid-1", "pv-1"), "mount")
	if mv := m.MountedVolumes("uid-1"); len(mv) != 1 || mv[0].Name != "data" || mv[0].Path != target {
		t.Fatalf("mounted volumes: %+v, want data at %s", mv, target)
	}
	if _, err := os.Stat(volDir(e.root, "uid-1", "data")); !os.IsNotExist(err) {
		t.Errorf("a directory named by the pod volume exists (%v)", err)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, ok, err := e.plugin.VolumeStats(e.ctx, "uid-1", "data"); err != nil || !ok || st == nil {
		t.Errorf("VolumeStats of data = %v, %v, %v; want the PV directory's stats", st, ok, err)
	}

	var err error
	if e.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)), NodeName: nodeName}); err != nil {
		t.Fatal(err)
	}
	m = e.manager(clk, &events{})
	m.AddPod(pod)
	m.Reconcile(e.ctx) // the scan finds pv-1; the pod's set-up claims it
	m.CleanupPods(map[types.UID]bool{"uid-1": true})
	m.Reconcile(e.ctx)
	if mv := m.MountedVolumes("uid-1"); len(mv) != 1 || mv[0].Name != "data" || mv[0].Path != target {
		t.Fatalf("mounted volumes after the restart: %+v, want data at %s", mv, target)
	}
	if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "kept" {
		t.Errorf("after the restart the volume reads %q (%v)", b, err)
	}
	rel := "pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"
	calls := e.calls()
	if n := callCount(calls, "NodePublishVolume vol-1 "+rel); n != 2 {
		t.Errorf("published %d times, want twice (again after the restart); calls:\n%s", n, strings.Join(calls, "\n"))
	}
	if n := callCount(calls, "NodeUnpublishVolume vol-1 "+rel); n != 0 {
		t.Errorf("unpublished %d times while the pod runs; calls:\n%s", n, strings.Join(calls, "\n"))
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
	m.Reconcile(e.ctx)
	calls = e.calls()
	if n := callCount(calls, "NodeUnpublishVolume vol-1 "+rel); n != 1 {
		t.Errorf("unpublished %d times after the pod left, want once; calls:\n%s", n, strings.Join(calls, "\n"))
	}
	if _, err := os.Stat(volDir(e.root, "uid-1", "pv-1")); !os.IsNotExist(err) {
		t.Errorf("the PV directory is left (%v)", err)
	}
}

// TestVolumeDirName: a claim by its PV; an inline volume, a block volume
// and a claim already in the pod volume's directory (nodekit's earlier
// layout, which stays in place) keep the pod volume's name.
func TestVolumeDirName(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	bpvc, bpv := blockClaim("bc", "pv-b", "vol-b")
	e := newEnv(t, pvc, pv, bpvc, bpv)
	claim := pvcVolume("claim")
	pod := podWith("p1", "uid-1", claim)
	if got, err := e.plugin.VolumeDirName(e.ctx, pod, &claim); err != nil || got != "pv-1" {
		t.Errorf("claim: %q, %v; want pv-1", got, err)
	}
	inline := v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driverName}}}
	if got, err := e.plugin.VolumeDirName(e.ctx, pod, &inline); err != nil || got != "" {
		t.Errorf("inline: %q, %v; want the pod volume's name", got, err)
	}
	block := pvcVolume("bc")
	if got, err := e.plugin.VolumeDirName(e.ctx, devicePod("b", "uid-2", block), &block); err != nil || got != "" {
		t.Errorf("block: %q, %v; want the pod volume's name", got, err)
	}
	missing := pvcVolume("nope")
	if _, err := e.plugin.VolumeDirName(e.ctx, pod, &missing); err == nil || !strings.Contains(err.Error(), "error processing PVC default/nope") {
		t.Errorf("unknown claim: %v", err)
	}
	writeVolData(t, volDir(e.root, "uid-1", "data"), map[string]string{"driverName": driverName, "volumeHandle": "vol-1", "specVolID": "pv-1"})
	if got, err := e.plugin.VolumeDirName(e.ctx, pod, &claim); err != nil || got != "" {
		t.Errorf("claim in the earlier layout: %q, %v; want it left in place", got, err)
	}
}
