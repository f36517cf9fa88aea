package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

// blockAgent is one agent of TestCSIBlockSideBySide.
type blockAgent = csiSBSAgent

// TestCSIBlockSideBySide runs a raw block volume and an online expansion
// on the upstream kubelet v1.37.2 and on fullagent at once (each its own
// node, containerd and instance of the test driver with EXPAND_VOLUME,
// one control plane with kube-controller-manager binding static PVs), and
// compares what each node shows: the device in the container (a block
// device that keeps what is written), the files and links each keeps for
// the block volume (under ROOT/plugins/kubernetes.io/csi/volumeDevices
// and the pod's directories, vol_data.json's content included, names
// normalized) while the pod runs and after it is deleted, the driver
// calls of the block volume, the claim's status and events after the
// expansion, NodeExpandVolume's target, and the pods' event reasons.
func TestCSIBlockSideBySide(t *testing.T) {
	cp, agents := startCSISideBySide(t, "blk", "syncFrequency: 10s\n", csitest.Options{ExpandVolume: true})
	client := cp.AdminClient()
	ctx := t.Context()
	if _, err := client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	uids := map[string]types.UID{}
	for _, a := range agents {
		uids[a.name] = startBlockPods(t, a)
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeBlockRunning(t, a, uids[a.name])...)
		growClaim(t, a.env, "grow-"+a.name, "pvg-"+a.name)
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeExpansion(t, a)...)
	}
	for _, a := range agents {
		for _, pod := range []string{"blk-" + a.name, "grow-" + a.name} {
			if err := client.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range agents {
		waitCall(t, a.drv, "NodeUnstageVolume volb-"+a.name+" ")
		waitCall(t, a.drv, "NodeUnstageVolume volg-"+a.name+" ")
		// Each agent removes the volume's directory (its vol_data.json)
		// after NodeUnstageVolume returns: wait for that step too, up to
		// 20 s, so the comparison does not race it (a directory left
		// longer shows as a difference).
		pvDir := filepath.Join(a.root, "plugins/kubernetes.io/csi/volumeDevices/pvb-"+a.name)
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			_, err := os.Stat(pvDir)
			return os.IsNotExist(err), nil
		})
		// The pod's own directories go with the pod, when each agent's
		// housekeeping gets to it: only the link is looked at.
		_, err := os.Lstat(filepath.Join(a.root, "pods", string(uids[a.name]), "volumeDevices/kubernetes.io~csi/pvb-"+a.name))
		got[a.name] = append(got[a.name], fmt.Sprintf("after delete: the pod's link gone=%v; block volume files:", os.IsNotExist(err)))
		got[a.name] = append(got[a.name], blockLayout(t, a, uids[a.name], "plugins/kubernetes.io/csi/volumeDevices")...)
		got[a.name] = append(got[a.name], "block volume calls: "+strings.Join(blockCalls(t, a, uids[a.name]), "; "))
	}
	compareAgents(t, got)
}

// startBlockPods creates the agent's block claim and its pod blk-NAME
// (the device at /dev/xvda), and the file system claim and its pod
// grow-NAME; it returns the block pod's UID.
func startBlockPods(t *testing.T, a *blockAgent) types.UID {
	t.Helper()
	ctx := t.Context()
	block := v1.PersistentVolumeBlock
	createPV(t, a.env, "pvb-"+a.name, "volb-"+a.name, "static", func(pv *v1.PersistentVolume) {
		pv.Spec.VolumeMode = &block
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "blk-" + a.name}
	})
	spec := claimSpec("static")
	spec.VolumeMode = &block
	if _, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Create(ctx,
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "blk-" + a.name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPV(t, a.env, "pvg-"+a.name, "volg-"+a.name, "static", func(pv *v1.PersistentVolume) {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "grow-" + a.name}
	})
	if _, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Create(ctx,
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "grow-" + a.name}, Spec: claimSpec("static")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, claim := range []string{"blk-" + a.name, "grow-" + a.name} {
		poll(t, 90*time.Second, "PVC "+claim+" bound", func(ctx context.Context) (bool, error) {
			c, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
			return err == nil && c.Status.Phase == v1.ClaimBound, nil
		})
	}
	bp := simplePod("blk-"+a.name, v1.RestartPolicyAlways, "sleep 3600")
	bp.Spec.Volumes = []v1.Volume{{Name: "dev", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "blk-" + a.name}}}}
	bp.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "dev", DevicePath: "/dev/xvda"}}
	gp := simplePod("grow-"+a.name, v1.RestartPolicyAlways, "echo kept > /data/f && sleep 3600")
	gp.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "grow-" + a.name}}}}
	gp.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	var uid types.UID
	for _, p := range []*v1.Pod{bp, gp} {
		p.Namespace, p.Spec.NodeName = "default", a.node
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		created, err := a.env.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p == bp {
			uid = created.UID
		}
	}
	return uid
}

// observeBlockRunning: the device in the container, and the block
// volume's files while its pod runs.
func observeBlockRunning(t *testing.T, a *blockAgent, uid types.UID) []string {
	t.Helper()
	p := a.env.waitPod(t, "blk-"+a.name, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	_, code, err := a.env.tryExec(t, p, "app", "test", "-b", "/dev/xvda")
	out := []string{fmt.Sprintf("running: /dev/xvda a block device=%v (%v)", code == 0, err)}
	a.env.exec(t, p, "app", "sh", "-c", "echo hello-block | dd of=/dev/xvda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	read := strings.TrimRight(a.env.exec(t, p, "app", "sh", "-c", "dd if=/dev/xvda bs=512 count=1 2>/dev/null | head -n 1"), "\x00\n")
	out = append(out, "the device reads "+read, "running: block volume files:")
	out = append(out, blockLayout(t, a, uid, "plugins/kubernetes.io/csi/volumeDevices", "pods/"+string(uid)+"/volumes/kubernetes.io~csi", "pods/"+string(uid)+"/volumeDevices")...)
	repl := strings.NewReplacer(a.root, "ROOT", string(uid), "UID", "pvb-"+a.name, "PV")
	return append(out, "block pod SuccessfulMountVolume: "+repl.Replace(eventMessages(t, a.env, "blk-"+a.name, "SuccessfulMountVolume")))
}

// growClaim does the resizer's part: the PV grows to 2Gi, the claim is
// marked for the node, once its pod runs.
func growClaim(t *testing.T, e *env, claim, pvName string) {
	t.Helper()
	ctx := t.Context()
	e.waitPod(t, claim, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	if _, err := e.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
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
}

// observeExpansion: the claim's status once at 2Gi (or after 90 s), its
// events, the NodeExpandVolume calls, and the pods' event reasons.
func observeExpansion(t *testing.T, a *blockAgent) []string {
	t.Helper()
	ctx := t.Context()
	claim := "grow-" + a.name
	var last v1.PersistentVolumeClaimStatus
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		c, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err == nil {
			last = c.Status
			if q := c.Status.Capacity[v1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) == 0 {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	var conds []string
	for _, c := range last.Conditions {
		conds = append(conds, string(c.Type)+"="+string(c.Status))
	}
	q := last.Capacity[v1.ResourceStorage]
	out := []string{fmt.Sprintf("after expansion: capacity=%s conditions=%v allocatedResourceStatuses=%v", q.String(), conds, last.AllocatedResourceStatuses)}
	time.Sleep(2 * time.Second) // the event follows the status patch
	out = append(out, "claim events: "+eventReasons(t, a.env, "PersistentVolumeClaim", claim))
	exp, err := a.drv.Expansions()
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.env.client.CoreV1().Pods("default").Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	repl := strings.NewReplacer(a.root, "ROOT", string(p.UID), "UID", "volg-"+a.name, "VOL", "pvg-"+a.name, "PV")
	for i := range exp {
		exp[i] = repl.Replace(exp[i]) // both name a claim's directory by its PV
	}
	out = append(out, fmt.Sprintf("NodeExpandVolume calls=%q", exp))
	for _, pod := range []string{"blk-" + a.name, "grow-" + a.name} {
		out = append(out, strings.TrimSuffix(pod, "-"+a.name)+" pod events: "+eventReasons(t, a.env, "Pod", pod))
	}
	return out
}

// eventReasons sums up the events of an object: TYPE/REASON, sorted,
// repeats dropped.
func eventReasons(t *testing.T, e *env, kind, name string) string {
	t.Helper()
	evs, err := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var rs []string
	for _, ev := range evs.Items {
		rs = append(rs, ev.Type+"/"+ev.Reason)
	}
	slices.Sort(rs)
	return strings.Join(slices.Compact(rs), " ")
}

// eventMessages lists the messages of the pod's events of reason, sorted.
func eventMessages(t *testing.T, e *env, pod, reason string) string {
	t.Helper()
	evs, err := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	for _, ev := range evs.Items {
		ms = append(ms, ev.Message)
	}
	slices.Sort(ms)
	return strings.Join(ms, " | ")
}

// blockLayout lists what the node keeps for its block volume: the entries
// below tops (relative to the root; links with their targets,
// vol_data.json with its content), names normalized.
func blockLayout(t *testing.T, a *blockAgent, uid types.UID, tops ...string) []string {
	t.Helper()
	repl := strings.NewReplacer(a.root, "ROOT", string(uid), "UID", "pvb-"+a.name, "PV", "volb-"+a.name, "VOL", a.node, "NODE")
	attachID := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("volb-"+a.name+csiTestDriver+a.node)))
	var out []string
	for _, top := range tops {
		_ = filepath.WalkDir(filepath.Join(a.root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil //nolint:nilerr // not there: nothing to list
			}
			line := repl.Replace(path)
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(path)
				line += " -> " + repl.Replace(target)
			case d.IsDir():
				line += "/"
			case d.Type()&fs.ModeDevice != 0:
				line += " (device)"
			case d.Name() == "vol_data.json":
				b, _ := os.ReadFile(path)
				var data map[string]string
				_ = json.Unmarshal(b, &data)
				if data["attachmentID"] == attachID {
					data["attachmentID"] = "csi-SHA256(VOL DRIVER NODE)"
				}
				for k, v := range data {
					data[k] = repl.Replace(v)
				}
				b, _ = json.Marshal(data) // keys sorted
				line += " " + string(b)
			}
			out = append(out, line)
			return nil
		})
	}
	return out
}

// blockCalls lists the driver's calls of the block volume but
// NodeGetVolumeStats, normalized.
func blockCalls(t *testing.T, a *blockAgent, uid types.UID) []string {
	t.Helper()
	calls, err := a.drv.Calls()
	if err != nil {
		t.Fatal(err)
	}
	repl := strings.NewReplacer(a.root, "ROOT", string(uid), "UID", "pvb-"+a.name, "PV", "volb-"+a.name, "VOL")
	var out []string
	for _, c := range calls {
		if strings.Contains(c, "volb-"+a.name) && !strings.HasPrefix(c, "NodeGetVolumeStats") { // stats: when each agent asks
			out = append(out, repl.Replace(c))
		}
	}
	return out
}
