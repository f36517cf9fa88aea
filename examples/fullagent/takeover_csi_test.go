package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest/csitest"
)

// The takeover test's CSI part: a pod with a claim bound to a static CSI
// PV, published by kubelet into POD/volumes/kubernetes.io~csi/PV/mount,
// must keep that mount, its data and its directory under fullagent and
// back, and the driver must never be asked to unpublish it.

const takeoverPV = "pv-takeover"

// startTakeoverCSI starts the test kit's CSI driver, registering through
// ROOT/plugins_registry (both agents watch it), and creates its CSIDriver
// object and the with-claim pod's bound claim.
func startTakeoverCSI(t *testing.T, e *env) *csitest.Process {
	t.Helper()
	drv := e.startCSIDriver(t, csitest.Options{})
	policy := storagev1.FileFSGroupPolicy
	if _, err := e.client.StorageV1().CSIDrivers().Create(t.Context(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), FSGroupPolicy: &policy,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bindClaimByHand(t, e, "takeover-claim", takeoverPV, "vol-takeover", v1.PersistentVolumeFilesystem)
	bindClaimByHand(t, e, "takeover-block", takeoverBlockPV, takeoverBlockHandle, v1.PersistentVolumeBlock) // takeover_block_test.go
	return drv
}

// bindClaimByHand creates a claim and a static CSI PV of the volume mode
// bound to each other as the PV controller would bind them (the takeover
// test runs no kube-controller-manager).
func bindClaimByHand(t *testing.T, e *env, claim, pvName, handle string, mode v1.PersistentVolumeMode) {
	t.Helper()
	ctx := t.Context()
	spec := claimSpec("static")
	spec.VolumeName = pvName
	spec.VolumeMode = &mode
	pvc, err := e.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createPV(t, e, pvName, handle, "static", func(pv *v1.PersistentVolume) {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim, UID: pvc.UID}
		pv.Spec.VolumeMode = &mode
	})
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = v1.VolumeBound
	if _, err := e.client.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = v1.ClaimBound
	pvc.Status.AccessModes = spec.AccessModes
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: spec.Resources.Requests[v1.ResourceStorage]}
	if _, err := e.client.CoreV1().PersistentVolumeClaims("default").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimPod writes a file into its claim once and sleeps.
func claimPod() *v1.Pod {
	p := simplePod("with-claim", v1.RestartPolicyAlways, "[ -e /data/f ] || echo kept > /data/f; sleep 3600")
	p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "takeover-claim"}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	return p
}

// checkClaimVolume: the claim's volume is still in the PV's directory (no
// other directory of the pod's CSI volumes), mounted, and the driver was
// never asked to unpublish or unstage it.
func (e *takeoverEnv) checkClaimVolume(t *testing.T, when string, uid types.UID) {
	t.Helper()
	dir := filepath.Join(e.root, "pods", string(uid), "volumes", "kubernetes.io~csi")
	entries, err := os.ReadDir(dir)
	var names []string
	for _, de := range entries {
		names = append(names, de.Name())
	}
	if err != nil || len(names) != 1 || names[0] != takeoverPV {
		t.Errorf("%s: with-claim's CSI volume directories %v (%v), want only %s", when, names, err, takeoverPV)
	}
	target := filepath.Join(dir, takeoverPV, "mount")
	if !isMountPoint(t, target) {
		t.Errorf("%s: %s is not mounted", when, target)
	}
	calls, err := e.csi.Calls()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "NodeUnpublishVolume") || strings.HasPrefix(c, "NodeUnstageVolume") {
			t.Errorf("%s: the driver was asked to take the running pod's volume down: %s", when, c)
		}
	}
}

// isMountPoint reports whether path is a mount point in this mount
// namespace.
func isMountPoint(t *testing.T, path string) bool {
	t.Helper()
	ok, err := csitest.IsMountPoint(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
