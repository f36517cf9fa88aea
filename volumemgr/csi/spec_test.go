package csi_test

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// setUpError runs SetUp with no driver registered: every case here fails
// before a driver is called.
func setUpError(t *testing.T, pod *v1.Pod, objs ...runtime.Object) error {
	t.Helper()
	p, err := csi.NewPlugin(csi.PluginConfig{RootDir: t.TempDir(), Drivers: csi.NewDrivers(), API: csi.FromClient(clientgo.Wrap(fake.NewClientset(objs...)))})
	if err != nil {
		t.Fatal(err)
	}
	vol := &pod.Spec.Volumes[0]
	if !p.CanSupport(vol) {
		t.Fatalf("plugin does not support %s", volumemgr.SourceName(vol))
	}
	_, err = p.SetUp(testContext(t), &volumemgr.SetUpRequest{Pod: pod, Volume: vol, PodDir: t.TempDir(), Dir: t.TempDir()})
	if err == nil {
		t.Fatal("SetUp succeeded")
	}
	return err
}

func TestClaimAndDriverErrors(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	unbound := pvc.DeepCopy()
	unbound.Status.Phase = v1.ClaimPending
	deleting := pvc.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	wrongRef := pv.DeepCopy()
	wrongRef.Spec.ClaimRef.UID = "other"
	nfs := pv.DeepCopy()
	nfs.Spec.CSI, nfs.Spec.NFS = nil, &v1.NFSVolumeSource{Server: "s", Path: "/"}
	block := pv.DeepCopy()
	bm := v1.PersistentVolumeBlock
	block.Spec.VolumeMode = &bm
	attach := csiDriver(storagev1.VolumeLifecyclePersistent)
	yes := true
	attach.Spec.AttachRequired = &yes
	tokens := csiDriver(storagev1.VolumeLifecyclePersistent)
	tokens.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "a"}}
	drv := csiDriver(storagev1.VolumeLifecyclePersistent)

	claimPod := podWith("p", "uid-1", pvcVolume("claim"))
	ephPod := podWith("p", "uid-1", v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}})
	ephPVC := pvc.DeepCopy()
	ephPVC.Name = "p-v"
	inlinePod := podWith("p", "uid-1", v1.Volume{Name: "i", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driverName}}})

	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		objs []runtime.Object
		want string
	}{
		{"missing claim", claimPod, nil, `error processing PVC default/claim: failed to fetch PVC from API server: persistentvolumeclaims "claim" not found`},
		{"unbound claim", claimPod, []runtime.Object{unbound}, "error processing PVC default/claim: PVC is not bound"},
		{"claim being deleted", claimPod, []runtime.Object{deleting, pv}, "error processing PVC default/claim: PVC is being deleted"},
		{"missing PV", claimPod, []runtime.Object{pvc}, `error processing PVC default/claim: failed to fetch PV pv-1 from API server: persistentvolumes "pv-1" not found`},
		{"PV bound elsewhere", claimPod, []runtime.Object{pvc, wrongRef}, "found PV object pv-1 but its pv.Spec.ClaimRef.UID other does not point to claim.UID pvc-uid-claim"},
		{"non-CSI PV", claimPod, []runtime.Object{pvc, nfs}, "no volume plugin matched"},
		{"block PV in volumeMounts", claimPod, []runtime.Object{pvc, block, drv}, "volume data has volumeMode Block, but is specified in volumeMounts"},
		{"no CSIDriver: attach", claimPod, []runtime.Object{pvc, pv}, "requires attachment"},
		{"attachRequired", claimPod, []runtime.Object{pvc, pv, attach}, "requires attachment"},
		{"tokenRequests without a token requester", claimPod, []runtime.Object{pvc, pv, tokens}, "spec.tokenRequests needs service-account tokens, and this node agent has no token requester"},
		{"driver not registered", claimPod, []runtime.Object{pvc, pv, drv}, "driver name csi.nodekit.test not found in the list of registered CSI drivers"},
		{"ephemeral claim not owned", ephPod, []runtime.Object{ephPVC, pv}, "PVC default/p-v was not created for pod default/p (pod is not owner)"},
		{"inline without CSIDriver", inlinePod, nil, `volume mode "Ephemeral" not supported by driver csi.nodekit.test (no CSIDriver object)`},
		{"inline, driver persistent only", inlinePod, []runtime.Object{drv}, `volume mode "Ephemeral" not supported by driver csi.nodekit.test (only supports ["Persistent"])`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := setUpError(t, tc.pod, tc.objs...)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if tc.name == "non-CSI PV" && !errors.Is(err, volumemgr.ErrNoPluginMatched) {
				t.Error("error does not wrap ErrNoPluginMatched")
			}
		})
	}
}

func TestEphemeralClaimOwnedByPod(t *testing.T) {
	pvc, pv := boundClaim("default", "p-v", "pv-1", "vol-1")
	pod := podWith("p", "uid-1", v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}})
	yes := true
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-1", Controller: &yes}}
	// Owned: resolution passes and stops only at the unregistered driver.
	err := setUpError(t, pod, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	if !strings.Contains(err.Error(), "not found in the list of registered CSI drivers") {
		t.Errorf("error %q, want the driver lookup to be what fails", err)
	}
}
