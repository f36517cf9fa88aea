package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

var kubeAPIAccess = regexp.MustCompile(`kube-api-access-[a-z0-9]{5}`)

// TestCSIRestartSideBySide runs TestCSIRestartBlockAndAttached's scenario
// on the upstream kubelet v1.37.2 and on fullagent at once (each on its
// own node with its own containerd, root dir and instance of the test
// driver; the CSIDriver attachRequired, kube-controller-manager's
// attach/detach controller and the test kit's attacher attaching): three
// pods on CSI volumes (a raw block claim, a file system claim, and a
// generic ephemeral volume beside an inline one), the agent killed with
// SIGKILL, the third pod deleted through the API server (grace period 0)
// while it is down, the agent started again; it compares what each node
// shows: the driver calls of each volume after the restart, the
// surviving pods' containers (same, not restarted), the mount table under
// the root (the survivors' mounts as they were, the deleted pod's gone),
// the loop devices, the deleted pod's directory and its volume's
// VolumeAttachment; then, the survivors deleted, the tear-down calls of
// their reconstructed volumes and no mount or loop device left.
func TestCSIRestartSideBySide(t *testing.T) {
	cp, agents := startCSISideBySide(t, "rs", "", csitest.Options{})
	client := cp.AdminClient()
	ctx := t.Context()
	if _, err := client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{
			storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csitest.StartAttacher(t, client, csitest.AttacherConfig{Driver: csiTestDriver})
	before := map[string]*restartSnapshot{}
	for _, a := range agents {
		startRestartPods(t, a)
	}
	for _, a := range agents {
		before[a.name] = snapshotRestart(t, a)
	}
	for _, a := range agents {
		a.proc.kill()
		if err := client.CoreV1().Pods("default").Delete(ctx, "rse-"+a.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		poll(t, 30*time.Second, "pod rse-"+a.name+" gone", func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Pods("default").Get(ctx, "rse-"+a.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		a.proc.start()
	}
	got := map[string][]string{}
	for _, a := range agents {
		got[a.name] = observeRestart(t, a, before[a.name])
	}
	// The survivors go too: their volumes, reconstructed, are torn down
	// (and no loop device is left to the machine).
	for _, a := range agents {
		for _, kind := range []string{"rsb", "rsa"} {
			if err := client.CoreV1().Pods("default").Delete(ctx, kind+"-"+a.name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeSurvivorsGone(t, a, before[a.name])...)
	}
	compareAgents(t, got)
}

// startRestartPods creates the agent's PVs (bound ahead to their claims)
// and claims, and its pods: rsb-AGENT with the block claim at /dev/xvda,
// rsa-AGENT with the file system claim, rse-AGENT with a generic
// ephemeral volume and an inline volume.
func startRestartPods(t *testing.T, a *csiSBSAgent) {
	t.Helper()
	ctx := t.Context()
	block := v1.PersistentVolumeBlock
	for _, kind := range []string{"rsb", "rsa", "rse"} {
		claim := kind + "-" + a.name
		if kind == "rse" {
			claim += "-scratch"
		}
		createPV(t, a.env, "pv"+kind+"-"+a.name, "vol"+kind+"-"+a.name, "static", func(pv *v1.PersistentVolume) {
			pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim}
			if kind == "rsb" {
				pv.Spec.VolumeMode = &block
			}
		})
		spec := claimSpec("static")
		if kind == "rsb" {
			spec.VolumeMode = &block
		}
		if kind != "rse" {
			if _, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Create(ctx,
				&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim}, Spec: spec}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitClaimBound(t, a, claim)
		}
	}
	bp := simplePod("rsb-"+a.name, v1.RestartPolicyAlways, "sleep 3600")
	bp.Spec.Volumes = []v1.Volume{{Name: "dev", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "rsb-" + a.name}}}}
	bp.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "dev", DevicePath: "/dev/xvda"}}
	ap := simplePod("rsa-"+a.name, v1.RestartPolicyAlways, "echo a > /data/a && sleep 3600")
	ap.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "rsa-" + a.name}}}}
	ap.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	ep := simplePod("rse-"+a.name, v1.RestartPolicyAlways, "echo e > /scratch/e && echo i > /inline/i && sleep 3600")
	ep.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: claimSpec("static")}}}},
		{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: csiTestDriver}}},
	}
	ep.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "inline", MountPath: "/inline"}}
	for _, p := range []*v1.Pod{bp, ap, ep} {
		p.Namespace, p.Spec.NodeName = "default", a.node
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		if _, err := a.env.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// loopsUnder lists the backing files of the host's loop devices that are
// under one of dirs (an agent's root, its driver's state dir), sorted,
// each as often as it backs a device: other tests' loop devices come
// and go meanwhile.
func loopsUnder(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, f := range loopBackingFiles(t) {
		if slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(f, d+"/") }) {
			out = append(out, f)
		}
	}
	return sorted(out)
}

// restartSnapshot is what an agent's node shows before the kill.
type restartSnapshot struct {
	pods   map[string]*v1.Pod // by kind: rsb, rsa, rse
	mounts []string           // rootMounts
	loops  []string
	calls  int
}

func snapshotRestart(t *testing.T, a *csiSBSAgent) *restartSnapshot {
	t.Helper()
	s := &restartSnapshot{pods: map[string]*v1.Pod{}}
	for _, kind := range []string{"rsb", "rsa", "rse"} {
		s.pods[kind] = a.env.waitPod(t, kind+"-"+a.name, 180*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}
	s.mounts, s.loops, s.calls = rootMounts(t, a.root), loopsUnder(t, a.root, a.drv.StateDir), len(driverCalls(t, a.drv))
	return s
}

// observeRestart: once the deleted pod's volumes are torn down (or 90 s
// passed) and 10 s more, the driver calls of each volume since the
// restart, the survivors' containers, the mounts and loop devices, the
// deleted pod's directory and its volume's attachment.
func observeRestart(t *testing.T, a *csiSBSAgent, b *restartSnapshot) []string {
	t.Helper()
	eph := b.pods["rse"]
	inline := inlineHandle(eph.UID, "inline")
	teardown := []string{"NodeUnpublishVolume " + inline + " ", "NodeUnpublishVolume volrse-" + a.name + " ", "NodeUnstageVolume volrse-" + a.name + " "}
	_ = pollUntil(t, 90*time.Second, func() bool {
		calls := driverCalls(t, a.drv)
		return !slices.ContainsFunc(teardown, func(c string) bool { return countPrefix(calls, c) == 0 })
	})
	time.Sleep(10 * time.Second) // room for further calls, wanted or not
	uids := map[string]types.UID{}
	for kind, p := range b.pods {
		uids[kind] = p.UID
	}
	repl := []string{a.root, "ROOT", inline, "csi-SHA256(UID(rse)+inline)"}
	for kind, uid := range uids {
		repl = append(repl, string(uid), "UID("+kind+")")
	}
	for _, kind := range []string{"rsa", "rse"} {
		repl = append(repl, stagingHash("vol"+kind+"-"+a.name), "SHA256(vol"+kind+")")
	}
	norm := strings.NewReplacer(append(repl, a.name, "NAME")...)
	byVolume := map[string][]string{}
	for _, c := range driverCalls(t, a.drv)[b.calls:] {
		if f := strings.Fields(norm.Replace(c)); len(f) == 3 && f[0] != "NodeGetVolumeStats" && f[0] != "NodeGetInfo" {
			byVolume[f[1]] = append(byVolume[f[1]], f[0]+" "+f[2])
		}
	}
	out := []string{"driver calls after the restart:"}
	for _, vol := range sorted(slices.Collect(maps.Keys(byVolume))) {
		out = append(out, "  "+vol+": "+strings.Join(byVolume[vol], "; "))
	}
	return append(out, restartState(t, a, b, norm)...)
}

// observeSurvivorsGone: once the survivors' volumes are unstaged, their
// last driver calls, and what is left of mounts and loop devices.
func observeSurvivorsGone(t *testing.T, a *csiSBSAgent, b *restartSnapshot) []string {
	t.Helper()
	waitCall(t, a.drv, "NodeUnstageVolume volrsb-"+a.name+" ")
	waitCall(t, a.drv, "NodeUnstageVolume volrsa-"+a.name+" ")
	norm := strings.NewReplacer(a.root, "ROOT", string(b.pods["rsb"].UID), "UID(rsb)", string(b.pods["rsa"].UID), "UID(rsa)",
		stagingHash("volrsa-"+a.name), "SHA256(volrsa)", a.name, "NAME")
	var out []string
	for _, vol := range []string{"volrsb-", "volrsa-"} {
		var calls []string
		for _, c := range driverCalls(t, a.drv) {
			if f := strings.Fields(norm.Replace(c)); len(f) == 3 && strings.HasPrefix(c, "NodeUn") && f[1] == vol+"NAME" {
				calls = append(calls, f[0]+" "+f[2])
			}
		}
		out = append(out, "survivors deleted: "+vol+"NAME: "+strings.Join(calls, "; "))
	}
	var left []string
	_ = pollUntil(t, 20*time.Second, func() bool {
		left = slices.DeleteFunc(rootMounts(t, a.root), func(m string) bool { return strings.Contains(m, "kubernetes.io~projected") })
		return len(left) == 0 && len(loopsUnder(t, a.root, a.drv.StateDir)) == 0
	})
	return append(out, fmt.Sprintf("survivors deleted: CSI mounts left=%d loop devices left=%d", len(left), len(loopsUnder(t, a.root, a.drv.StateDir))))
}

// restartState: the survivors' containers, the mounts, loop devices, the
// deleted pod's directory and attachment.
func restartState(t *testing.T, a *csiSBSAgent, b *restartSnapshot, norm *strings.Replacer) []string {
	t.Helper()
	var out []string
	for _, kind := range []string{"rsb", "rsa"} {
		p, err := a.env.client.CoreV1().Pods("default").Get(t.Context(), kind+"-"+a.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cb, ca := containerStatus(b.pods[kind], "app"), containerStatus(p, "app")
		out = append(out, fmt.Sprintf("%s: phase=%s same container=%v restarts=%d", kind, p.Status.Phase,
			ca != nil && ca.ContainerID == cb.ContainerID, ca.RestartCount))
	}
	eph := b.pods["rse"]
	ephStaging := filepath.Join(a.root, "plugins/kubernetes.io/csi", csiTestDriver, stagingHash("volrse-"+a.name), "globalmount")
	survivors := slices.DeleteFunc(slices.Clone(b.mounts), func(m string) bool {
		return strings.Contains(m, "/pods/"+string(eph.UID)+"/") || strings.Contains(m, " "+ephStaging+" ")
	})
	after := rootMounts(t, a.root)
	var points []string
	for _, m := range after {
		points = append(points, kubeAPIAccess.ReplaceAllString(norm.Replace(strings.Fields(m)[2]), "kube-api-access-XXXXX"))
	}
	out = append(out, fmt.Sprintf("mounts: the survivors' as before=%v, the deleted pod's before=%d", slices.Equal(after, survivors), len(b.mounts)-len(survivors)),
		"mount points after: "+strings.Join(sorted(points), " "))
	loops := loopsUnder(t, a.root, a.drv.StateDir)
	if !slices.Equal(loops, b.loops) {
		t.Logf("%s: loop devices after the restart %q, before %q", a.name, loops, b.loops)
	}
	out = append(out, fmt.Sprintf("loop devices: %d before, as before=%v", len(b.loops), slices.Equal(loops, b.loops)))
	_ = pollUntil(t, 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(a.root, "pods", string(eph.UID)))
		return os.IsNotExist(err)
	})
	_, err := os.Stat(filepath.Join(a.root, "pods", string(eph.UID)))
	va := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("volrse-"+a.name+csiTestDriver+a.node)))
	detached := pollUntil(t, 90*time.Second, func() bool {
		_, err := a.env.client.StorageV1().VolumeAttachments().Get(t.Context(), va, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	return append(out, fmt.Sprintf("deleted pod: directory gone=%v, its volume detached=%v", os.IsNotExist(err), detached))
}
