package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// TestCSIAttach runs the attach/detach contract with the real
// kube-controller-manager's attach/detach controller and the test kit's
// external attacher (csitest.Attacher, in the csi-attacher sidecar's
// place) for a driver whose CSIDriver says attachRequired: the Node
// carries the controller-managed-attach-detach annotation; a pod with a
// PVC on it does not start while the attacher fails the attachment (the
// controller's FailedAttachVolume event carries its error; nothing is
// staged); once attached, the volume is in status.volumesInUse and
// volumesAttached, staged and published with the attachment's metadata as
// publish context, and the pod runs; after the pod is deleted the volume
// leaves volumesInUse, and the controller detaches: the VolumeAttachment
// goes.
func TestCSIAttach(t *testing.T) {
	e := startEnv(t, envOption{cp: []agenttest.ControlPlaneOption{agenttest.WithControllerManager()}})
	ctx := t.Context()
	drv := e.startCSIDriver(t, csitest.Options{})
	if _, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	att := csitest.StartAttacher(t, e.client, csitest.AttacherConfig{Driver: csiTestDriver,
		Metadata: map[string]string{"devicePath": "/dev/nodekit0"}})
	att.Fail("rpc error: code = Unavailable desc = no disk yet")

	n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"]; got != "true" {
		t.Fatalf("controller-managed-attach-detach annotation %q, want true", got)
	}
	poll(t, 60*time.Second, "CSINode lists the driver", func(ctx context.Context) (bool, error) {
		cn, err := e.client.StorageV1().CSINodes().Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && len(cn.Spec.Drivers) == 1, nil
	})

	createBoundClaim(t, e, "att-claim", "pv-att", "vol-att")
	unique := csi.UniqueVolumeName(csiTestDriver, "vol-att")
	vaName := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("vol-att"+csiTestDriver+testNode)))
	pod := simplePod("csi-att", v1.RestartPolicyAlways, "echo a > /data/a && sleep 3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "att-claim"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	e.createPod(t, pod)

	// The volume is reported in use at once, and the controller asks for
	// the attachment, which the attacher fails.
	poll(t, 60*time.Second, "volumesInUse lists "+string(unique), func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && slices.Equal(n.Status.VolumesInUse, []v1.UniqueVolumeName{unique}), nil
	})
	e.waitEvent(t, "csi-att", "FailedAttachVolume", "no disk yet")
	time.Sleep(3 * time.Second) // the agent has had time to mount, if it were to
	if p, err := e.client.CoreV1().Pods("default").Get(ctx, "csi-att", metav1.GetOptions{}); err != nil || p.Status.Phase == v1.PodRunning {
		t.Fatalf("pod %v while its volume is not attached (%v)", describeStatus(p), err)
	}
	if calls, _ := drv.Calls(); slices.ContainsFunc(calls, func(c string) bool { return strings.Contains(c, "vol-att") }) {
		t.Fatalf("driver called for a volume not attached: %q", calls)
	}

	att.Recover()
	w := e.waitPod(t, "csi-att", 180*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if got := strings.TrimSpace(e.exec(t, w, "app", "cat", "/data/a")); got != "a" {
		t.Errorf("/data/a reads %q", got)
	}
	va, err := e.client.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
	if err != nil || !va.Status.Attached || va.Spec.NodeName != testNode {
		t.Fatalf("VolumeAttachment %s: %+v, %v", vaName, va, err)
	}
	n, err = e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Status.VolumesInUse, []v1.UniqueVolumeName{unique}) ||
		!slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique }) {
		t.Errorf("node status: volumesInUse %v, volumesAttached %v", n.Status.VolumesInUse, n.Status.VolumesAttached)
	}
	pc, err := drv.PublishContexts()
	if err != nil || !slices.Equal(pc, []string{"NodeStageVolume vol-att devicePath=/dev/nodekit0", "NodePublishVolume vol-att devicePath=/dev/nodekit0"}) {
		t.Errorf("publish contexts %q (%v), want the attachment metadata at stage and publish", pc, err)
	}

	deletePodAndWait(t, e, "csi-att")
	waitCall(t, drv, "NodeUnstageVolume vol-att ")
	poll(t, 60*time.Second, "volumesInUse empty", func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && len(n.Status.VolumesInUse) == 0, nil
	})
	poll(t, 90*time.Second, "VolumeAttachment "+vaName+" deleted (detached)", func(ctx context.Context) (bool, error) {
		_, err := e.client.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if !slices.Contains(att.Detached(), vaName) {
		t.Errorf("the attacher saw no detach of %s: %v", vaName, att.Detached())
	}
	poll(t, 60*time.Second, "volumesAttached empty", func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && len(n.Status.VolumesAttached) == 0, nil
	})
}
