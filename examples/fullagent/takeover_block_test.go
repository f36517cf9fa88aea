package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// The takeover test's raw block part: a pod with a Block claim bound to a
// static CSI PV (the test driver serves it as a loop-backed file), mapped
// by kubelet as upstream lays block volumes out, must keep its device,
// the device's data, the publish file, the pod's link and the descriptor
// lock (a bind mount with one loop device on it) under fullagent and
// back, and the driver must never be asked to unpublish or unstage it.

const (
	takeoverBlockPV     = "pv-takeover-block"
	takeoverBlockHandle = "vol-takeover-block"
	takeoverBlockMarker = "takeover-block"
)

// blockPod writes a marker into the first sector of its device at start
// and sleeps.
func blockPod() *v1.Pod {
	p := simplePod("with-block", v1.RestartPolicyAlways,
		"echo "+takeoverBlockMarker+" | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null; sleep 3600")
	p.Spec.Volumes = []v1.Volume{{Name: "dev", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "takeover-block"}}}}
	p.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "dev", DevicePath: "/dev/xvda"}}
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	return p
}

// blockVolumeCalls lists the driver's stage, publish, unpublish and
// unstage calls of the block volume, from the n-th call of its log on,
// with the root dir and the pod's UID replaced by ROOT and UID.
func (e *takeoverEnv) blockVolumeCalls(t *testing.T, n int, uid types.UID) []string {
	t.Helper()
	calls, err := e.csi.Calls()
	if err != nil {
		t.Fatal(err)
	}
	repl := strings.NewReplacer(e.root, "ROOT", string(uid), "UID")
	var out []string
	for _, c := range calls[min(n, len(calls)):] {
		f := strings.Fields(c)
		if len(f) < 2 || f[1] != takeoverBlockHandle {
			continue
		}
		switch f[0] {
		case "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume":
			out = append(out, repl.Replace(c))
		}
	}
	return out
}

// callCount is the length of the driver's call log.
func (e *takeoverEnv) callCount(t *testing.T) int {
	t.Helper()
	calls, err := e.csi.Calls()
	if err != nil {
		t.Fatal(err)
	}
	return len(calls)
}

// The block volume's stage and publish, as both agents call them when
// they map it (and again after taking over a running pod: each redoes
// both, idempotently, on the same paths).
var takeoverBlockMapCalls = []string{
	"NodeStageVolume " + takeoverBlockHandle + " ROOT/plugins/kubernetes.io/csi/volumeDevices/staging/" + takeoverBlockPV,
	"NodePublishVolume " + takeoverBlockHandle + " ROOT/plugins/kubernetes.io/csi/volumeDevices/publish/" + takeoverBlockPV + "/UID",
}

// checkBlockVolume: the device is still in the container with the
// marker, the publish file is mounted, the pod's link points at it, the
// descriptor lock's bind mount is there with exactly one loop device, the
// driver's file has exactly one loop device, and the driver's calls of
// the volume since the n-th are want.
func (e *takeoverEnv) checkBlockVolume(t *testing.T, when string, p *v1.Pod, n int, want []string) {
	t.Helper()
	id := nodekit.ContainerID{ID: containerIDOf(p, "app")}
	if out, stderr, code, err := e.rt.ExecSync(t.Context(), id, []string{"test", "-b", "/dev/xvda"}, 10*time.Second); err != nil || code != 0 {
		t.Errorf("%s: /dev/xvda is no block device in with-block: %q (code %d, %v, %s)", when, out, code, err, stderr)
	}
	out, stderr, code, err := e.rt.ExecSync(t.Context(), id, []string{"sh", "-c", "dd if=/dev/xvda bs=512 count=1 2>/dev/null | head -n 1"}, 10*time.Second)
	if got := strings.TrimRight(string(out), "\x00\n"); err != nil || code != 0 || got != takeoverBlockMarker {
		t.Errorf("%s: with-block's device reads %q (code %d, %v, %s), want %q", when, got, code, err, stderr, takeoverBlockMarker)
	}
	devices := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices")
	publish := filepath.Join(devices, "publish", takeoverBlockPV, string(p.UID))
	if !isMountPoint(t, publish) {
		t.Errorf("%s: the publish file %s is not mounted", when, publish)
	}
	if fi, err := os.Stat(filepath.Join(devices, "staging", takeoverBlockPV)); err != nil || !fi.IsDir() {
		t.Errorf("%s: the staging path: %v", when, err)
	}
	link := filepath.Join(e.root, "pods", string(p.UID), "volumeDevices/kubernetes.io~csi", takeoverBlockPV)
	if target, err := os.Readlink(link); err != nil || target != publish {
		t.Errorf("%s: the pod's link %s -> %q (%v), want %s", when, link, target, err, publish)
	}
	global := filepath.Join(devices, takeoverBlockPV, "dev", string(p.UID))
	if !isMountPoint(t, global) {
		t.Errorf("%s: the descriptor lock's bind mount %s is not there", when, global)
	}
	img := filepath.Join(e.csi.StateDir, "volumes", takeoverBlockHandle+".img")
	loops := map[string]int{}
	for _, f := range loopBackingFiles(t) {
		loops[f]++
	}
	if loops[global] != 1 || loops[img] != 1 {
		t.Errorf("%s: loop devices on the lock %s: %d, on the driver's file: %d; want one each (all: %v)", when, global, loops[global], loops[img], loops)
	}
	got := e.blockVolumeCalls(t, n, p.UID)
	t.Logf("%s: the driver's calls of the block volume: %q", when, got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: the driver's calls of the block volume %q, want %q", when, got, want)
	}
}

// pod reads a pod from the API.
func (e *takeoverEnv) pod(t *testing.T, name string) *v1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// blockLoops maps the loop devices whose backing file is the block
// volume's global map path or the driver's file, to that file.
func (e *takeoverEnv) blockLoops(t *testing.T, uid types.UID) map[string]string {
	t.Helper()
	global := filepath.Join(e.root, "plugins/kubernetes.io/csi/volumeDevices", takeoverBlockPV, "dev", string(uid))
	img := filepath.Join(e.csi.StateDir, "volumes", takeoverBlockHandle+".img")
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"); backing == global || backing == img {
			out["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = backing
		}
	}
	return out
}

// detachBlockLoopsOnCleanup detaches, when the test ends (before the root
// dir's mounts go, after which the lock's backing file no longer has its
// path), the loop devices of the block volume that no agent tore down:
// the descriptor lock's first, then the driver's.
func (e *takeoverEnv) detachBlockLoopsOnCleanup(t *testing.T, uid types.UID) {
	t.Helper()
	t.Cleanup(func() {
		loops := e.blockLoops(t, uid)
		devs := make([]string, 0, len(loops))
		for dev, backing := range loops {
			if strings.HasPrefix(backing, e.root+"/") {
				devs = append([]string{dev}, devs...)
			} else {
				devs = append(devs, dev)
			}
		}
		for _, dev := range devs {
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				t.Logf("losetup -d %s (%s): %v: %s", dev, loops[dev], err, out)
			}
		}
	})
}

// deleteBlockPod deletes the with-block pod under the agent that runs
// last and checks that it tears the volume down: unpublished and
// unstaged once each, no loop device of it left.
func (e *takeoverEnv) deleteBlockPod(t *testing.T, uid types.UID) {
	t.Helper()
	n := e.callCount(t)
	deletePodAndWait(t, &env{client: e.client}, "with-block")
	waitCall(t, e.csi, "NodeUnstageVolume "+takeoverBlockHandle+" ")
	want := []string{
		"NodeUnpublishVolume " + takeoverBlockHandle + " ROOT/plugins/kubernetes.io/csi/volumeDevices/publish/" + takeoverBlockPV + "/UID",
		"NodeUnstageVolume " + takeoverBlockHandle + " ROOT/plugins/kubernetes.io/csi/volumeDevices/staging/" + takeoverBlockPV,
	}
	if got := e.blockVolumeCalls(t, n, uid); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("with-block deleted: the driver's calls of its volume %q, want %q", got, want)
	}
	// The driver logs NodeUnstageVolume before it detaches its device.
	var loops map[string]string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if loops = e.blockLoops(t, uid); len(loops) == 0 {
			return
		}
	}
	t.Errorf("with-block deleted: loop devices left: %v", loops)
}
