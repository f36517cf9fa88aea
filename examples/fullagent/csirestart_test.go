package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

// TestCSIRestartBlockAndAttached kills fullagent with SIGKILL while three
// pods run on CSI volumes of a driver whose CSIDriver says attachRequired
// (attached by kube-controller-manager's attach/detach controller and the
// test kit's attacher): a raw block volume in volumeDevices, a file
// system volume, and a generic ephemeral volume with a CSI inline volume
// beside it. While the agent is down the third pod is deleted through the
// API server (grace period 0, as kubectl delete --force). Started again on
// the same root, the agent restarts no container of the other two, stages
// and publishes each of their volumes once more (as upstream's kubelet
// does for the volumes it reconstructs, which it marks uncertain) and
// tears none down; it unpublishes the deleted pod's inline volume,
// unpublishes and unstages its ephemeral volume (which the controller then
// detaches), stops its container and removes its directory; the mount
// table (/proc/self/mountinfo under the root) is what it was but the
// deleted pod's mounts, the loop devices are as they were, and the device
// still reads what was written before and takes new writes. Deleting the
// pods afterwards unpublishes and unstages both volumes (the block
// volume's upstream files removed), the controller detaches them, and no
// mount is left.
func TestCSIRestartBlockAndAttached(t *testing.T) {
	e := startProcEnvOpts(t, procEnvOptions{cp: []agenttest.ControlPlaneOption{agenttest.WithControllerManager()}})
	e.rootDir = e.root
	ctx := t.Context()
	drv := e.startCSIDriver(t, csitest.Options{})
	if _, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{
			storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csitest.StartAttacher(t, e.client, csitest.AttacherConfig{Driver: csiTestDriver, Metadata: map[string]string{"devicePath": "/dev/nodekit0"}})
	poll(t, 60*time.Second, "CSINode lists the driver", func(ctx context.Context) (bool, error) {
		cn, err := e.client.StorageV1().CSINodes().Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && len(cn.Spec.Drivers) == 1, nil
	})

	block := v1.PersistentVolumeBlock
	createPV(t, e.env, "pv-rs-block", "vol-rs-block", "static", func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = &block })
	spec := claimSpec("static")
	spec.VolumeMode = &block
	if _, err := e.client.CoreV1().PersistentVolumeClaims("default").Create(ctx,
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "rs-block-claim"}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createBoundClaim(t, e.env, "rs-att-claim", "pv-rs-att", "vol-rs-att")

	bp := simplePod("rs-block", v1.RestartPolicyAlways, "sleep 3600")
	bp.Spec.Volumes = []v1.Volume{{Name: "dev", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "rs-block-claim"}}}}
	bp.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "dev", DevicePath: "/dev/xvda"}}
	e.createPod(t, bp)
	ap := simplePod("rs-att", v1.RestartPolicyAlways, "echo a > /data/a && sleep 3600")
	ap.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "rs-att-claim"}}}}
	ap.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	e.createPod(t, ap)
	eph := restartEphemeralPod(t, e)
	before := map[string]*v1.Pod{}
	for _, name := range []string{"rs-block", "rs-att"} {
		before[name] = e.waitPod(t, name, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}
	eph = e.waitPod(t, eph.Name, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	e.exec(t, before["rs-block"], "app", "sh", "-c", "echo before-restart | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	mountsBefore, loopsBefore := rootMounts(t, e.root), loopsUnder(t, e.root, drv.StateDir)
	callsBefore := driverCalls(t, drv)
	ephStaging := callPath(t, callsBefore, "NodeStageVolume vol-rs-eph ")

	e.agent.kill()
	if err := e.client.CoreV1().Pods("default").Delete(ctx, eph.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "pod rs-eph gone from the API server while the agent is down", func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods("default").Get(ctx, eph.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	restarted := time.Now()
	e.agent.start()
	// Upstream's count: once at the start, once for the reconstruction.
	want := map[string]int{
		"NodeStageVolume vol-rs-block " + filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/staging/pv-rs-block"):                                   2,
		"NodePublishVolume vol-rs-block " + filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-rs-block", string(before["rs-block"].UID)): 2,
		"NodeStageVolume vol-rs-att ":   2,
		"NodePublishVolume vol-rs-att ": 2,
	}
	poll(t, 60*time.Second, "both volumes staged and published again after the restart", func(context.Context) (bool, error) {
		calls := driverCalls(t, drv)
		for c, n := range want {
			if countPrefix(calls, c) < n {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("volumes set up again %v after the restart", time.Since(restarted).Round(time.Millisecond))
	checkDeletedWhileDown(t, e, drv, eph)
	t.Logf("the pod deleted while the agent was down cleaned up %v after the restart", time.Since(restarted).Round(time.Millisecond))
	time.Sleep(5 * time.Second) // room for any further (unwanted) call
	calls := driverCalls(t, drv)
	for c, n := range want {
		if got := countPrefix(calls, c); got != n {
			t.Errorf("%q: %d calls, want %d", c, got, n)
		}
	}
	for _, c := range calls[len(callsBefore):] {
		if (strings.HasPrefix(c, "NodeUnpublishVolume") || strings.HasPrefix(c, "NodeUnstageVolume")) && !strings.Contains(c, string(eph.UID)) &&
			!strings.HasPrefix(c, "NodeUnstageVolume vol-rs-eph ") {
			t.Errorf("a running pod's volume torn down after the restart: %s", c)
		}
	}
	for name, b := range before {
		p := e.waitPod(t, name, 30*time.Second, "Running after the restart", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		cb, ca := containerStatus(b, "app"), containerStatus(p, "app")
		if ca == nil || ca.ContainerID != cb.ContainerID || ca.RestartCount != 0 {
			t.Errorf("%s: container %+v after the restart, was %s with no restart", name, ca, cb.ContainerID)
		}
	}
	survivors := slices.DeleteFunc(slices.Clone(mountsBefore), func(m string) bool {
		return strings.Contains(m, "/pods/"+string(eph.UID)+"/") || strings.Contains(m, " "+ephStaging+" ")
	})
	if n := countContaining(mountsBefore, "/pods/"+string(eph.UID)+"/volumes/kubernetes.io~csi/") + countContaining(mountsBefore, " "+ephStaging+" "); n != 3 {
		t.Errorf("CSI mounts of the deleted pod before the restart: %d, want 3 (staging, two publish targets):\n%s", n, strings.Join(mountsBefore, "\n"))
	}
	if got := rootMounts(t, e.root); !slices.Equal(got, survivors) {
		t.Errorf("mounts under the root after the restart:\n%s\nbefore, but the deleted pod's:\n%s", strings.Join(got, "\n"), strings.Join(survivors, "\n"))
	}
	if got := loopsUnder(t, e.root, drv.StateDir); !slices.Equal(got, loopsBefore) {
		t.Errorf("loop devices after the restart %q, before %q", got, loopsBefore)
	}
	if got := strings.TrimRight(e.exec(t, before["rs-block"], "app", "sh", "-c", "dd if=/dev/xvda bs=512 count=1 2>/dev/null | head -n 1"), "\x00\n"); got != "before-restart" {
		t.Errorf("the device reads %q after the restart, want before-restart", got)
	}
	e.exec(t, before["rs-block"], "app", "sh", "-c", "echo after-restart | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	if got := strings.TrimRight(e.exec(t, before["rs-block"], "app", "sh", "-c", "dd if=/dev/xvda bs=512 count=1 2>/dev/null | head -n 1"), "\x00\n"); got != "after-restart" {
		t.Errorf("the device reads %q after a write, want after-restart", got)
	}
	if got := strings.TrimSpace(e.exec(t, before["rs-att"], "app", "cat", "/data/a")); got != "a" {
		t.Errorf("/data/a reads %q after the restart", got)
	}

	for _, name := range []string{"rs-block", "rs-att"} {
		deletePodAndWait(t, e.env, name)
	}
	waitCall(t, drv, "NodeUnstageVolume vol-rs-block ")
	waitCall(t, drv, "NodeUnstageVolume vol-rs-att ")
	calls = driverCalls(t, drv)
	for _, c := range []string{"NodeUnpublishVolume vol-rs-block ", "NodeUnpublishVolume vol-rs-att ", "NodeUnstageVolume vol-rs-block ", "NodeUnstageVolume vol-rs-att "} {
		if n := countPrefix(calls, c); n != 1 {
			t.Errorf("%q: %d calls, want 1", c, n)
		}
	}
	for _, handle := range []string{"vol-rs-block", "vol-rs-att"} {
		va := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+csiTestDriver+testNode)))
		poll(t, 90*time.Second, "VolumeAttachment of "+handle+" deleted (detached)", func(ctx context.Context) (bool, error) {
			_, err := e.client.StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	if got := rootMounts(t, e.root); len(got) > 0 {
		t.Errorf("mounts left under the root: %q", got)
	}
	for _, f := range loopBackingFiles(t) {
		if strings.HasPrefix(f, e.root+"/") {
			t.Errorf("loop device left on %s", f)
		}
	}
	for _, p := range []string{"plugins/kubernetes.io/csi/volumeDevices/pv-rs-block", "plugins/kubernetes.io/csi/volumeDevices/staging/pv-rs-block",
		"plugins/kubernetes.io/csi/volumeDevices/publish/pv-rs-block"} {
		if _, err := os.Lstat(filepath.Join(e.root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
}

// rootMounts returns the mounts whose mount point is under root, from
// /proc/self/mountinfo, each as its line without the mount and parent IDs
// ("MAJOR:MINOR ROOT MOUNT-POINT OPTIONS ... - FSTYPE SOURCE SUPER"), so a
// mount made again, or another on top, shows; sorted.
func rootMounts(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			out = append(out, strings.Join(f[2:], " "))
		}
	}
	return sorted(out)
}

// restartEphemeralPod creates the pod rs-eph: a generic ephemeral volume
// (its claim bound ahead to the static PV pv-rs-eph) and a CSI inline
// volume.
func restartEphemeralPod(t *testing.T, e *procEnv) *v1.Pod {
	t.Helper()
	createPV(t, e.env, "pv-rs-eph", "vol-rs-eph", "static", func(pv *v1.PersistentVolume) {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "rs-eph-scratch"}
	})
	p := simplePod("rs-eph", v1.RestartPolicyAlways, "echo e > /scratch/e && echo i > /inline/i && sleep 3600")
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	p.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: claimSpec("static")}}}},
		{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: csiTestDriver}}},
	}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "inline", MountPath: "/inline"}}
	e.createPod(t, p)
	return p
}

// checkDeletedWhileDown checks that the restarted agent cleaned up the pod
// deleted while it was down: its inline volume unpublished, its ephemeral
// volume unpublished and unstaged (each once), no mount left under its
// directory, its container stopped, its directory removed, and its
// volume detached by the controller.
func checkDeletedWhileDown(t *testing.T, e *procEnv, drv *csitest.Process, eph *v1.Pod) {
	t.Helper()
	inline := inlineHandle(eph.UID, "inline")
	for _, c := range []string{"NodeUnpublishVolume " + inline + " ", "NodeUnpublishVolume vol-rs-eph ", "NodeUnstageVolume vol-rs-eph "} {
		waitCall(t, drv, c)
	}
	e.waitRuntime(t, eph.UID, 60*time.Second, "the deleted pod's container stopped", func(p *nodekit.Pod) bool { return running(p)["app"] == "" })
	poll(t, 60*time.Second, "the deleted pod's directory removed", func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(e.root, "pods", string(eph.UID)))
		return os.IsNotExist(err), nil
	})
	if left := mountsOf(t, eph.UID); len(left) > 0 {
		t.Errorf("mounts left of the pod deleted while the agent was down: %q", left)
	}
	calls := driverCalls(t, drv)
	for _, c := range []string{"NodeUnpublishVolume " + inline + " ", "NodeUnpublishVolume vol-rs-eph ", "NodeUnstageVolume vol-rs-eph "} {
		if n := countPrefix(calls, c); n != 1 {
			t.Errorf("%q: %d calls, want 1", c, n)
		}
	}
	va := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("vol-rs-eph"+csiTestDriver+testNode)))
	poll(t, 90*time.Second, "VolumeAttachment of vol-rs-eph deleted (detached)", func(ctx context.Context) (bool, error) {
		_, err := e.client.StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// callPath returns the path of the first call starting with prefix.
func callPath(t *testing.T, calls []string, prefix string) string {
	t.Helper()
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			f := strings.Fields(c)
			return f[len(f)-1]
		}
	}
	t.Fatalf("no driver call %q in %q", prefix, calls)
	return ""
}

func countContaining(lines []string, part string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, part) {
			n++
		}
	}
	return n
}

func driverCalls(t *testing.T, drv *csitest.Process) []string {
	t.Helper()
	calls, err := drv.Calls()
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

func countPrefix(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
