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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

const csiTestDriver = "csi.nodekit.test"

// TestCSIVolumes runs the test kit's CSI driver as a separate process that
// registers through ROOT/plugins_registry, a static PV bound to a PVC by
// the controller manager's PV binder, and an inline CSI volume: the data a
// pod writes on the PVC outlives the pod, a PV's stage secret reaches the
// driver (the node reads it under the Node authorizer), the inline volume
// comes and goes with its pod, and no mount is left behind.
func TestCSIVolumes(t *testing.T) {
	e := startEnv(t, envOption{cp: []agenttest.ControlPlaneOption{agenttest.WithControllerManager()}})
	ctx := t.Context()
	drv := e.startCSIDriver(t, csitest.Options{Topology: map[string]string{"topology.csi.nodekit.test/zone": "z1"}})

	t.Run("registration: CSINode, nodeid annotation, topology label", func(t *testing.T) {
		poll(t, 60*time.Second, "CSINode lists the driver", func(ctx context.Context) (bool, error) {
			cn, err := e.client.StorageV1().CSINodes().Get(ctx, testNode, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && len(cn.Spec.Drivers) == 1 && cn.Spec.Drivers[0].NodeID == "agent-node-id" &&
				slices.Equal(cn.Spec.Drivers[0].TopologyKeys, []string{"topology.csi.nodekit.test/zone"}), err
		})
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Annotations[csi.NodeIDAnnotation]; got != `{"csi.nodekit.test":"agent-node-id"}` {
			t.Errorf("nodeid annotation %q", got)
		}
		if n.Labels["topology.csi.nodekit.test/zone"] != "z1" {
			t.Errorf("node labels %v", n.Labels)
		}
	})

	policy := storagev1.FileFSGroupPolicy
	_, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), FSGroupPolicy: &policy,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("static PV and PVC: data outlives the pod", func(t *testing.T) {
		createBoundClaim(t, e, "data-claim", "pv-data", "vol-data")
		claim := v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-claim"}}}
		writer := simplePod("csi-writer", v1.RestartPolicyAlways, "echo hello > /data/f && sleep 3600")
		writer.Spec.Volumes = []v1.Volume{claim}
		writer.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		e.createPod(t, writer)
		w := e.waitPod(t, "csi-writer", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if got := strings.TrimSpace(e.exec(t, w, "app", "cat", "/data/f")); got != "hello" {
			t.Errorf("/data/f reads %q", got)
		}
		if len(mountsOf(t, w.UID)) == 0 {
			t.Error("no mount under the writer's pod dir")
		}
		deletePodAndWait(t, e, "csi-writer")
		if left := mountsOf(t, w.UID); len(left) > 0 {
			t.Errorf("mounts left of the deleted writer: %v", left)
		}

		reader := simplePod("csi-reader", v1.RestartPolicyNever, `test "$(cat /data/f)" = hello`)
		reader.Spec.Volumes = []v1.Volume{claim}
		reader.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		e.createPod(t, reader)
		p := e.waitPod(t, "csi-reader", 120*time.Second, "finished", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		})
		if p.Status.Phase != v1.PodSucceeded {
			t.Errorf("the second pod did not read the first's file: %s", describeStatus(p))
		}
		deletePodAndWait(t, e, "csi-reader")
		waitCall(t, drv, "NodeUnstageVolume vol-data ")
	})

	t.Run("PV secrets reach the driver through the node's authorization", func(t *testing.T) {
		sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stage-creds"}, Data: map[string][]byte{"user": []byte("alice")}}
		if _, err := e.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createPV(t, e, "pv-secret", "vol-secret", "static-secret", func(pv *v1.PersistentVolume) {
			pv.Spec.CSI.NodeStageSecretRef = &v1.SecretReference{Namespace: "default", Name: "stage-creds"}
		})
		pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "secret-claim"}, Spec: claimSpec("static-secret")}
		if _, err := e.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := simplePod("csi-secret", v1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "secret-claim"}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		e.createPod(t, pod)
		e.waitPod(t, "csi-secret", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		got, err := drv.Secrets()
		if err != nil || !slices.Contains(got, "NodeStageVolume vol-secret user=alice") {
			t.Errorf("the driver's secrets log %q (%v), want the stage secret of vol-secret", got, err)
		}
		deletePodAndWait(t, e, "csi-secret")
		waitCall(t, drv, "NodeUnstageVolume vol-secret ")
	})

	t.Run("generic ephemeral volume: the pod's PVC, bound to a static PV", func(t *testing.T) {
		createPV(t, e, "pv-eph", "vol-eph", "static-eph")
		pod := simplePod("csi-eph", v1.RestartPolicyAlways, "echo e > /eph/e && sleep 3600")
		pod.Spec.Volumes = []v1.Volume{{Name: "eph", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: claimSpec("static-eph")}}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "eph", MountPath: "/eph"}}
		e.createPod(t, pod)
		p := e.waitPod(t, "csi-eph", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if got := strings.TrimSpace(e.exec(t, p, "app", "cat", "/eph/e")); got != "e" {
			t.Errorf("/eph/e reads %q", got)
		}
		pvc, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "csi-eph-eph", metav1.GetOptions{})
		if err != nil || !metav1.IsControlledBy(pvc, p) || pvc.Spec.VolumeName != "pv-eph" {
			t.Errorf("the pod's claim: %+v, %v", pvc, err)
		}
		deletePodAndWait(t, e, "csi-eph")
		if left := mountsOf(t, p.UID); len(left) > 0 {
			t.Errorf("mounts left of the ephemeral pod: %v", left)
		}
		waitCall(t, drv, "NodeUnstageVolume vol-eph ")
	})

	t.Run("inline CSI volume comes and goes with its pod", func(t *testing.T) {
		pod := simplePod("csi-inline", v1.RestartPolicyAlways, "echo x > /scratch/x && sleep 3600")
		pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: csiTestDriver}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		e.createPod(t, pod)
		p := e.waitPod(t, "csi-inline", 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if got := strings.TrimSpace(e.exec(t, p, "app", "cat", "/scratch/x")); got != "x" {
			t.Errorf("/scratch/x reads %q", got)
		}
		deletePodAndWait(t, e, "csi-inline")
		if left := mountsOf(t, p.UID); len(left) > 0 {
			t.Errorf("mounts left of the inline pod: %v", left)
		}
		waitCall(t, drv, "NodeUnpublishVolume csi-")
	})
}

func poll(t *testing.T, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

// createBoundClaim creates a static CSI PV and a PVC for it, and waits for
// the controller manager to bind them.
func createBoundClaim(t *testing.T, e *env, claim, pvName, handle string) {
	t.Helper()
	ctx := t.Context()
	createPV(t, e, pvName, handle, "static")
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim}, Spec: claimSpec("static")}
	if _, err := e.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 90*time.Second, "PVC "+claim+" bound", func(ctx context.Context) (bool, error) {
		c, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		return err == nil && c.Status.Phase == v1.ClaimBound && c.Spec.VolumeName == pvName, nil
	})
}

func deletePodAndWait(t *testing.T, e *env, name string) {
	t.Helper()
	if err := e.client.CoreV1().Pods("default").Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
		t.Fatal(err)
	}
	poll(t, 90*time.Second, "pod "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// waitCall waits for a driver call starting with prefix.
func waitCall(t *testing.T, drv *csitest.Process, prefix string) {
	t.Helper()
	poll(t, 60*time.Second, "driver call "+prefix, func(context.Context) (bool, error) {
		calls, err := drv.Calls()
		return slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) }), err
	})
}

// createPV creates a static 1Gi RWO CSI PV of the storage class, changed
// by edit.
func createPV(t *testing.T, e *env, name, handle, class string, edit ...func(*v1.PersistentVolume)) {
	t.Helper()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
		StorageClassName:              class,
		PersistentVolumeSource:        v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: csiTestDriver, VolumeHandle: handle}},
	}}
	for _, f := range edit {
		f(pv)
	}
	if _, err := e.client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func claimSpec(class string) v1.PersistentVolumeClaimSpec {
	return v1.PersistentVolumeClaimSpec{
		AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		StorageClassName: ptr.To(class),
		Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

// startCSIDriver builds the test kit's CSI driver and starts it as its own
// process registering with the agent (o's Name, NodeID and RegistryDir
// default to csiTestDriver, agent-node-id and the agent's registry).
func (e *env) startCSIDriver(t *testing.T, o csitest.Options) *csitest.Process {
	t.Helper()
	bin, err := csitest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.Name == "" {
		o.Name = csiTestDriver
	}
	if o.NodeID == "" {
		o.NodeID = "agent-node-id"
	}
	if o.RegistryDir == "" {
		o.RegistryDir = filepath.Join(e.rootDir, "plugins_registry")
	}
	return csitest.Start(t, bin, o)
}

// compareAgents logs what each agent of a side-by-side CSI test showed
// and fails the test if the two differ, naming the lines that do (a log
// cut short still shows them).
func compareAgents(t *testing.T, got map[string][]string) {
	t.Helper()
	k, f := got["kubelet"], got["fullagent"]
	t.Logf("kubelet v1.37.2:\n  %s\nfullagent:\n  %s", strings.Join(k, "\n  "), strings.Join(f, "\n  "))
	if slices.Equal(k, f) {
		return
	}
	var diff []string
	for i := range max(len(k), len(f)) {
		kl, fl := "(none)", "(none)"
		if i < len(k) {
			kl = k[i]
		}
		if i < len(f) {
			fl = f[i]
		}
		if kl != fl {
			diff = append(diff, fmt.Sprintf("line %d:\n    kubelet:   %s\n    fullagent: %s", i+1, kl, fl))
		}
	}
	if len(diff) > 10 {
		diff = append(diff[:10], fmt.Sprintf("and %d more lines", len(diff)-10))
	}
	t.Errorf("the agents differ:\n  %s", strings.Join(diff, "\n  "))
}
