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

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

// TestCSIRestartBlockAndAttached kills fullagent with SIGKILL while two
// pods run on CSI volumes of a driver whose CSIDriver says attachRequired
// (attached by kube-controller-manager's attach/detach controller and the
// test kit's attacher): a raw block volume in volumeDevices and a file
// system volume. Started again on the same root, the agent restarts no
// container, stages and publishes each running volume once more (as
// upstream's kubelet does for the volumes it reconstructs, which it marks
// uncertain) and no more, leaves the mount table and the loop devices as
// they were, and the device still reads what was written before and
// takes new writes. Deleting the pods afterwards unpublishes and unstages
// both volumes (the block volume's upstream files removed) and the
// controller detaches them.
func TestCSIRestartBlockAndAttached(t *testing.T) {
	e := startProcEnvOpts(t, procEnvOptions{cp: []agenttest.ControlPlaneOption{agenttest.WithControllerManager()}})
	e.rootDir = e.root
	ctx := t.Context()
	drv := e.startCSIDriver(t, csitest.Options{})
	if _, err := e.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
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
	before := map[string]*v1.Pod{}
	for _, name := range []string{"rs-block", "rs-att"} {
		before[name] = e.waitPod(t, name, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}
	e.exec(t, before["rs-block"], "app", "sh", "-c", "echo before-restart | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	mountsBefore, loopsBefore := rootMounts(t, e.root), loopBackingFiles(t)
	callsBefore := driverCalls(t, drv)

	e.agent.kill()
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
	time.Sleep(5 * time.Second) // room for any further (unwanted) call
	calls := driverCalls(t, drv)
	for c, n := range want {
		if got := countPrefix(calls, c); got != n {
			t.Errorf("%q: %d calls, want %d", c, got, n)
		}
	}
	for _, c := range calls[len(callsBefore):] {
		if strings.HasPrefix(c, "NodeUnpublishVolume") || strings.HasPrefix(c, "NodeUnstageVolume") {
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
	if got := rootMounts(t, e.root); !slices.Equal(got, mountsBefore) {
		t.Errorf("mounts under the root after the restart:\n%s\nbefore:\n%s", strings.Join(got, "\n"), strings.Join(mountsBefore, "\n"))
	}
	if got := loopBackingFiles(t); !slices.Equal(sorted(got), sorted(loopsBefore)) {
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

// rootMounts returns the mount points under root, sorted.
func rootMounts(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(mounts(t), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], root+"/") {
			out = append(out, f[1])
		}
	}
	return sorted(out)
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
