package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

// TestCSIBlockAndExpansion runs the test kit's CSI driver (with
// EXPAND_VOLUME) as a separate process beside the agent, the controller
// manager binding static PVs: a pod given a Block PVC in volumeDevices
// sees a block device at its devicePath, writes and reads it, and the
// device is unpublished, unstaged and its loop device detached when the
// pod goes; a mounted Filesystem PVC expanded as the resizer would (the
// PV's capacity grown, the claim's status marked NodeResizePending) ends
// with NodeExpandVolume called on the published path and the claim's
// status showing the new size.
func TestCSIBlockAndExpansion(t *testing.T) {
	e := startEnv(t, envOption{cp: []agenttest.ControlPlaneOption{agenttest.WithControllerManager()}})
	ctx := t.Context()
	drv := e.startCSIDriver(t, csitest.Options{ExpandVolume: true})
	poll(t, 60*time.Second, "CSINode lists the driver", func(ctx context.Context) (bool, error) {
		cn, err := e.client.StorageV1().CSINodes().Get(ctx, testNode, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(cn.Spec.Drivers) == 1, err
	})
	_, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("block PVC: a device at devicePath", func(t *testing.T) { testBlockPod(t, e, drv) })
	t.Run("online expansion of a mounted volume", func(t *testing.T) { testOnlineExpansion(t, e, drv) })
}

func testBlockPod(t *testing.T, e *env, drv *csitest.Process) {
	ctx := t.Context()
	block := v1.PersistentVolumeBlock
	createPV(t, e, "pv-block", "vol-block", "static", func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = &block })
	spec := claimSpec("static")
	spec.VolumeMode = &block
	if _, err := e.client.CoreV1().PersistentVolumeClaims("default").Create(ctx,
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "block-claim"}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 90*time.Second, "PVC block-claim bound", func(ctx context.Context) (bool, error) {
		c, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "block-claim", metav1.GetOptions{})
		return err == nil && c.Status.Phase == v1.ClaimBound, nil
	})
	pod := simplePod("csi-block", v1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "dev", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "block-claim"}}}}
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "dev", DevicePath: "/dev/xvda"}}
	e.createPod(t, pod)
	p := e.waitPod(t, "csi-block", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	e.exec(t, p, "app", "test", "-b", "/dev/xvda")
	e.exec(t, p, "app", "sh", "-c", "echo hello-block | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	if got := strings.TrimRight(e.exec(t, p, "app", "sh", "-c", "dd if=/dev/xvda bs=512 count=1 2>/dev/null | head -n 1"), "\x00\n"); got != "hello-block" {
		t.Errorf("the device reads %q, want hello-block", got)
	}
	calls, err := drv.Calls()
	if err != nil {
		t.Fatal(err)
	}
	wantPublish := "NodePublishVolume vol-block " + filepath.Join(e.rootDir, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-block", string(p.UID))
	if !slices.Contains(calls, wantPublish) {
		t.Errorf("calls %q, want %q", calls, wantPublish)
	}
	// The descriptor lock while the pod runs: a loop device on the global
	// map path.
	global := filepath.Join(e.rootDir, "plugins/kubernetes.io/csi/volumeDevices/pv-block/dev", string(p.UID))
	if !slices.Contains(loopBackingFiles(t), global) {
		t.Errorf("no loop device on %s: %q", global, loopBackingFiles(t))
	}
	// The publish path is a mount under the root while the pod runs, so
	// the check after it goes below looks where the mounts are.
	if !slices.ContainsFunc(rootMounts(t, e.rootDir), func(l string) bool {
		return strings.Contains(l, "/volumeDevices/publish/pv-block/"+string(p.UID)+" ")
	}) {
		t.Errorf("no mount on the publish path under %s: %q", e.rootDir, rootMounts(t, e.rootDir))
	}
	deletePodAndWait(t, e, "csi-block")
	waitCall(t, drv, "NodeUnstageVolume vol-block")
	for _, f := range loopBackingFiles(t) {
		if strings.HasPrefix(f, e.rootDir+"/") || strings.HasPrefix(f, drv.StateDir+"/") {
			t.Errorf("loop device left on %s", f)
		}
	}
	// Only this agent's root: another run's mounts on the machine are not
	// this pod's.
	for _, l := range rootMounts(t, e.rootDir) {
		if strings.Contains(l, "/volumeDevices/") || strings.Contains(l, "/pods/"+string(p.UID)+"/") {
			t.Errorf("mount left behind: %s", l)
		}
	}
}

func testOnlineExpansion(t *testing.T, e *env, drv *csitest.Process) {
	ctx := t.Context()
	createBoundClaim(t, e, "grow-claim", "pv-grow", "vol-grow")
	pod := simplePod("csi-grow", v1.RestartPolicyAlways, "echo kept > /data/f && sleep 3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "grow-claim"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	e.createPod(t, pod)
	p := e.waitPod(t, "csi-grow", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	// The resizer's part: the PV grows, the claim is marked for the node.
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, "pv-grow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	if _, err := e.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "grow-claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.Now(), Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node."}}
	if _, err := e.client.CoreV1().PersistentVolumeClaims("default").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent looks every sync period (20s here), as kubelet on each pod
	// sync; the claim's other conditions (v1.37's Unused) stay.
	var last v1.PersistentVolumeClaimStatus
	defer func() {
		if t.Failed() {
			t.Logf("last status of grow-claim: %+v", last)
		}
	}()
	poll(t, 90*time.Second, "PVC grow-claim status at 2Gi", func(ctx context.Context) (bool, error) {
		c, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "grow-claim", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = c.Status
		got := c.Status.Capacity[v1.ResourceStorage]
		pending := slices.ContainsFunc(c.Status.Conditions, func(c v1.PersistentVolumeClaimCondition) bool {
			return c.Type == v1.PersistentVolumeClaimFileSystemResizePending
		})
		return got.Cmp(resource.MustParse("2Gi")) == 0 && !pending && len(c.Status.AllocatedResourceStatuses) == 0, nil
	})
	exp, err := drv.Expansions()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("vol-grow %s %d", filepath.Join(e.rootDir, "pods", string(p.UID), "volumes/kubernetes.io~csi/pv-grow/mount"), int64(2<<30))
	if !slices.Equal(exp, []string{want}) {
		t.Errorf("NodeExpandVolume calls %q, want %q", exp, want)
	}
	poll(t, 30*time.Second, "FileSystemResizeSuccessful event", func(ctx context.Context) (bool, error) {
		evs, err := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=grow-claim"})
		return err == nil && slices.ContainsFunc(evs.Items, func(ev v1.Event) bool { return ev.Reason == "FileSystemResizeSuccessful" }), err
	})
	if got := strings.TrimSpace(e.exec(t, p, "app", "cat", "/data/f")); got != "kept" {
		t.Errorf("/data/f reads %q after expansion", got)
	}
	deletePodAndWait(t, e, "csi-grow")
	waitCall(t, drv, "NodeUnstageVolume vol-grow")
}

// loopBackingFiles lists the backing files of the host's loop devices.
func loopBackingFiles(t *testing.T) []string {
	t.Helper()
	files, err := csitest.LoopBackingFiles()
	if err != nil {
		t.Fatal(err)
	}
	return files
}
