package main

import (
	"context"
	"fmt"
	"math"
	"os"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// csiVolPods are the pods of TestCSIVolumesSideBySide on each node
// (named KIND-AGENT): data writes a file on a claim (fsGroup 1234) and
// gives it to group 0, ro
// mounts a claim readOnly, eph has a generic ephemeral volume, inl a CSI
// inline volume, fail a claim whose NodePublishVolume the driver fails
// until told to recover, failstage one whose NodeStageVolume it
// fails as long, rwop a ReadWriteOncePod claim (which rwop2, created
// later, asks for too), and fsg (fsGroup 1234) the claims of fsgClaims
// on the two extra drivers (csirwop_sbs_test.go).
var csiVolPods = []string{"data", "ro", "eph", "inl", "fail", "failstage", "rwop", "fsg"}

// csiVolClaims are the kinds of pods of csiVolPods with a static PV of
// their own: PVKIND-AGENT, volume handle VOLKIND-AGENT.
var csiVolClaims = []string{"data", "ro", "fail", "failstage", "eph", "rwop"}

// publishFailures is how many NodePublishVolume calls of the fail pod's
// volume (and NodeStageVolume calls of the failstage pod's) the driver
// fails before it recovers.
const publishFailures = 5

// TestCSIVolumesSideBySide runs the CSI volume scenarios of TestCSIVolumes
// on the upstream kubelet v1.37.2 and on fullagent at once (each on its
// own node with its own containerd, root dir and instance of the test
// driver; one control plane with kube-controller-manager binding static
// PVs and creating generic ephemeral claims, its attach/detach controller
// and the test kit's attacher attaching, the CSIDriver attachRequired),
// and compares what each node shows: the CSINode object (driver, node ID,
// topology keys), the node's nodeid annotation and topology label; a
// claim not bound yet (the pod's state and FailedMount event); with the
// pods running, the file on the claim, its fsGroup, a readOnly claim
// that takes no write, the generic ephemeral claim owned by its pod, the
// inline volume, node.status.volumesInUse and the CSI mounts under the
// root; for a volume whose NodePublishVolume fails, the pod's state and
// FailedMount events while it fails, the intervals between the driver's
// NodePublishVolume calls (the retry back-off) and the pod running once
// the driver recovers; after the pods are deleted, the driver calls of
// each volume and the access mode it was given (the PV's first), no CSI
// mount left, volumesInUse emptied, and a pod created again on the first
// claim reading the file written before (fsGroupChangePolicy
// OnRootMismatch leaving its group as it is);
// when the driver goes, the CSINode entry and the annotation removed.
// Two more drivers (csirwop_sbs_test.go), one with
// SINGLE_NODE_MULTI_WRITER, one with fsGroupPolicy None, show the access
// modes each gets and the fsGroup the node applies by policy and access
// mode; a second pod bound by nodeName to a ReadWriteOncePod claim in use
// is refused (its state and FailedMount event, the first pod
// unaffected) until the first pod is deleted, and then runs.
func TestCSIVolumesSideBySide(t *testing.T) {
	cp, agents := startCSISideBySide(t, "vol", "", csitest.Options{Topology: map[string]string{"topology.csi.nodekit.test/zone": "z1"}})
	client := cp.AdminClient()
	ctx := t.Context()
	policy := storagev1.FileFSGroupPolicy
	if _, err := client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), FSGroupPolicy: &policy,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csitest.StartAttacher(t, client, csitest.AttacherConfig{Driver: csiTestDriver})

	got := map[string][]string{}
	uids := map[string]map[string]types.UID{}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeRegistration(t, client, a)...)
		createVolumeClaims(t, a)
	}
	startExtraDrivers(t, client, agents) // csirwop_sbs_test.go
	for _, a := range agents {
		uids[a.name] = startVolumePods(t, a)
	}
	// The failing volumes first: their retries run on the agents' clocks
	// from the pods' creation, and the failures must be seen before the
	// last retry succeeds (8 s after the fifth failure), which waiting
	// for the ro claim's binding first could outlast.
	for name, lines := range observePublishBackoff(t, agents) {
		got[name] = append(got[name], lines...)
	}
	for name, lines := range observeUnboundClaim(t, agents) {
		got[name] = append(got[name], lines...)
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeVolumesRunning(t, a, uids[a.name])...)
		got[a.name] = append(got[a.name], observeFSGroups(t, a, uids[a.name])...)
	}
	for name, lines := range observeRWOPRefused(t, agents, uids) {
		got[name] = append(got[name], lines...)
	}
	for _, a := range agents {
		for _, kind := range csiVolPods {
			if err := client.CoreV1().Pods("default").Delete(ctx, kind+"-"+a.name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, lines := range observeRWOPHandover(t, agents) {
		got[name] = append(got[name], lines...)
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeVolumesGone(t, a, uids[a.name])...)
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeDataKept(t, a)...)
	}
	for _, a := range agents {
		a.drv.Stop()
		for _, d := range a.extra {
			d.Stop()
		}
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeDeregistered(t, client, a)...)
	}
	compareAgents(t, got)
}

// observeRegistration: the agent's CSINode object and the node's nodeid
// annotation and topology label, the node's name as NODE.
func observeRegistration(t *testing.T, client kubernetes.Interface, a *csiSBSAgent) []string {
	t.Helper()
	ctx := t.Context()
	cn, err := client.StorageV1().CSINodes().Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range cn.OwnerReferences {
		out = append(out, fmt.Sprintf("CSINode owner %s/%s", o.Kind, o.Name))
	}
	for _, d := range cn.Spec.Drivers {
		var limit any = "none"
		if d.Allocatable != nil && d.Allocatable.Count != nil {
			limit = *d.Allocatable.Count
		}
		out = append(out, fmt.Sprintf("CSINode driver %s nodeID=%s topologyKeys=%v allocatable=%v", d.Name, d.NodeID, d.TopologyKeys, limit))
	}
	n, err := client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, "nodeid annotation "+n.Annotations[csi.NodeIDAnnotation], "zone label "+n.Labels["topology.csi.nodekit.test/zone"])
	for i := range out {
		out[i] = strings.ReplaceAll(out[i], a.node, "NODE")
	}
	return out
}

// createVolumeClaims creates the agent's claims of csiVolClaims and
// their static PVs, each bound ahead (claimRef) to its claim (the generic
// ephemeral volume's eph-AGENT-scratch is the controller manager's to
// create), and waits for them to be bound; but ro-AGENT's PV, left for
// observeUnboundClaim to create.
func createVolumeClaims(t *testing.T, a *csiSBSAgent) {
	t.Helper()
	for _, kind := range csiVolClaims {
		claim := kind + "-" + a.name
		if kind == "eph" {
			claim += "-scratch"
		}
		if kind != "ro" {
			createClaimPV(t, a, kind, claim)
		}
		if kind == "eph" {
			continue
		}
		mode := v1.ReadWriteOnce
		if kind == "rwop" {
			mode = v1.ReadWriteOncePod
		}
		createClaim(t, a, claim, mode)
		if kind != "ro" {
			waitClaimBound(t, a, claim)
		}
	}
}

// createClaimPV creates the PV of a kind of csiVolClaims, bound ahead to
// claim; the access modes of ro's are [ReadOnlyMany ReadWriteOnce],
// eph's [ReadWriteOnce ReadWriteMany] (upstream passes the first to the
// driver), rwop's [ReadWriteOncePod], the others' [ReadWriteOnce].
func createClaimPV(t *testing.T, a *csiSBSAgent, kind, claim string) {
	t.Helper()
	createPV(t, a.env, "pv"+kind+"-"+a.name, "vol"+kind+"-"+a.name, "static", func(pv *v1.PersistentVolume) {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim}
		switch kind {
		case "ro":
			pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany, v1.ReadWriteOnce}
		case "eph":
			pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadWriteMany}
		case "rwop":
			pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}
		}
	})
}

func waitClaimBound(t *testing.T, a *csiSBSAgent, claim string) {
	t.Helper()
	poll(t, 90*time.Second, "PVC "+claim+" bound", func(ctx context.Context) (bool, error) {
		c, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		return err == nil && c.Status.Phase == v1.ClaimBound, nil
	})
}

var serviceAccountVolume = regexp.MustCompile(` ?kube-api-access-[a-z0-9]{5}`)

// unmountedNorm drops the service-account token volume from the
// "unmounted volumes" of the messages (" | " between them), and repeats:
// whether it is mounted yet when the claim's error comes is a race in
// either agent.
func unmountedNorm(messages string) string {
	ms := strings.Split(serviceAccountVolume.ReplaceAllString(messages, ""), " | ")
	return strings.Join(slices.Compact(sorted(ms)), " | ")
}

// observeUnboundClaim: the ro pod's state and events while its claim is
// not bound (at least 5 s after it was created), then the claim's PV is
// created and bound.
func observeUnboundClaim(t *testing.T, agents []*csiSBSAgent) map[string][]string {
	t.Helper()
	time.Sleep(5 * time.Second) // the agents have had time to act on the unbound claim
	out := map[string][]string{}
	for _, a := range agents {
		p, err := a.env.client.CoreV1().Pods("default").Get(t.Context(), "ro-"+a.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waiting := ""
		if c := containerStatus(p, "app"); c != nil && c.State.Waiting != nil {
			waiting = c.State.Waiting.Reason
		}
		out[a.name] = []string{fmt.Sprintf("claim not bound: phase=%s waiting=%s events=%s", p.Status.Phase, waiting,
			strings.ReplaceAll(eventReasons(t, a.env, "Pod", "ro-"+a.name), a.name, "NAME")),
			"claim not bound: FailedMount " + unmountedNorm(strings.ReplaceAll(eventMessages(t, a.env, "ro-"+a.name, "FailedMount"), a.name, "NAME"))}
		createClaimPV(t, a, "ro", "ro-"+a.name)
	}
	for _, a := range agents {
		waitClaimBound(t, a, "ro-"+a.name)
	}
	return out
}

// volumePod is the agent's pod of a kind of csiVolPods.
func volumePod(a *csiSBSAgent, kind string) *v1.Pod {
	claim := func(name string, ro bool) v1.VolumeSource {
		return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-" + a.name, ReadOnly: ro}}
	}
	var p *v1.Pod
	switch kind {
	case "data", "data2":
		// The writer gives its file back to group 0; the next pod, with
		// fsGroupChangePolicy OnRootMismatch (the volume's root has the
		// fsGroup already), finds it so.
		cmd := "echo hello > /data/f && chgrp 0 /data/f && sleep 3600"
		sc := &v1.PodSecurityContext{FSGroup: ptr.To[int64](1234)}
		if kind == "data2" {
			cmd = `test "$(cat /data/f)" = hello && test "$(stat -c %g /data/f)" = 0`
			sc.FSGroupChangePolicy = ptr.To(v1.FSGroupChangeOnRootMismatch)
		}
		p = simplePod(kind+"-"+a.name, v1.RestartPolicyNever, cmd)
		p.Spec.SecurityContext = sc
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: claim("data", false)}}
	case "ro", "fail", "failstage":
		p = simplePod(kind+"-"+a.name, v1.RestartPolicyNever, "sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: claim(kind, kind == "ro")}}
	case "rwop", "rwop2":
		p = simplePod(kind+"-"+a.name, v1.RestartPolicyNever, "sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: claim("rwop", false)}}
	case "fsg":
		p = fsgPod(a) // csirwop_sbs_test.go
	case "eph":
		p = simplePod(kind+"-"+a.name, v1.RestartPolicyNever, "echo e > /data/e && sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: claimSpec("static")}}}}}
	case "inl":
		p = simplePod(kind+"-"+a.name, v1.RestartPolicyNever, "echo i > /data/i && sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: csiTestDriver}}}}
	}
	if len(p.Spec.Containers[0].VolumeMounts) == 0 {
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: p.Spec.Volumes[0].Name, MountPath: "/data"}}
	}
	p.Namespace, p.Spec.NodeName = "default", a.node
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	return p
}

// startVolumePods makes the driver fail the first publishFailures
// NodePublishVolume calls of the fail pod's volume and NodeStageVolume
// calls of the failstage pod's, creates the agent's pods and returns
// their UIDs by kind.
func startVolumePods(t *testing.T, a *csiSBSAgent) map[string]types.UID {
	t.Helper()
	if err := a.drv.FailVolumeTimes("NodePublishVolume", "Internal", "volfail-"+a.name, publishFailures); err != nil {
		t.Fatal(err)
	}
	if err := a.drv.FailVolumeTimes("NodeStageVolume", "Internal", "volfailstage-"+a.name, publishFailures); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, kind := range csiVolPods {
		p := volumePod(a, kind)
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		created, err := a.env.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[kind] = created.UID
	}
	return uids
}

// rpcCalls returns the times of the driver's calls of rpc for a volume.
func rpcCalls(t *testing.T, drv *csitest.Process, rpc, handle string) []time.Time {
	t.Helper()
	calls, err := drv.TimedCalls()
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, c := range calls {
		if strings.HasPrefix(c.Call, rpc+" "+handle+" ") {
			out = append(out, c.At)
		}
	}
	return out
}

// observePublishBackoff waits for each agent's driver to fail the fail
// pod's NodePublishVolume, and the failstage pod's NodeStageVolume,
// publishFailures times each, noting the pod's state and FailedMount
// events then (the agent's next retry, which succeeds, comes 8 s later;
// the driver counts the failures itself, so the calls each agent makes
// do not depend on how soon this poll sees them) and waits for the pod
// to run; it returns, by agent, those and
// the intervals between the NodePublishVolume calls of the fail volume
// (the last the successful one), each as the back-off it shows (0.5 s
// times a power of two).
func observePublishBackoff(t *testing.T, agents []*csiSBSAgent) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	failing := []struct{ kind, rpc, note string }{
		{"fail", "NodePublishVolume", "while failing"},
		{"failstage", "NodeStageVolume", "while failing stage"},
	}
	noted := map[string][]string{} // by KIND-AGENT
	poll(t, 180*time.Second, fmt.Sprintf("%d failed NodePublishVolume and NodeStageVolume calls on each node", publishFailures), func(ctx context.Context) (bool, error) {
		for _, a := range agents {
			for _, f := range failing {
				key, handle := f.kind+"-"+a.name, "vol"+f.kind+"-"+a.name
				if noted[key] != nil || len(rpcCalls(t, a.drv, f.rpc, handle)) < publishFailures {
					continue
				}
				lines, err := failingPodState(ctx, t, a, f.kind, f.note)
				if err != nil {
					return false, err
				}
				noted[key] = lines
			}
		}
		return len(noted) == len(agents)*len(failing), nil
	})
	for _, a := range agents {
		for _, f := range failing {
			out[a.name] = append(out[a.name], noted[f.kind+"-"+a.name]...)
		}
		a.env.waitPod(t, "fail-"+a.name, 120*time.Second, "Running after the driver recovered", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		at := rpcCalls(t, a.drv, "NodePublishVolume", "volfail-"+a.name)
		var raw, rounded []string
		for i := 1; i < len(at); i++ {
			d := at[i].Sub(at[i-1])
			raw = append(raw, d.Round(10*time.Millisecond).String())
			// A retry comes its back-off after the failure, and later by
			// as long as the agent takes to get to it: the back-off is
			// the largest 0.5 s times a power of two not above the
			// interval.
			rounded = append(rounded, fmt.Sprintf("%gs", 0.5*math.Exp2(math.Floor(math.Log2(d.Seconds()/0.5)+0.01))))
		}
		t.Logf("%s: intervals between NodePublishVolume calls of the failing volume: %v", a.name, raw)
		out[a.name] = append(out[a.name], fmt.Sprintf("NodePublishVolume calls=%d intervals=%v, running after the recovery", len(at), rounded))
	}
	return out
}

// failingPodState notes the state of the agent's pod KIND-AGENT and its
// FailedMount events, as "NOTE: ..." lines.
func failingPodState(ctx context.Context, t *testing.T, a *csiSBSAgent, kind, note string) ([]string, error) {
	p, err := a.env.client.CoreV1().Pods("default").Get(ctx, kind+"-"+a.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	waiting := ""
	if c := containerStatus(p, "app"); c != nil && c.State.Waiting != nil {
		waiting = c.State.Waiting.Reason
	}
	return []string{
		fmt.Sprintf("%s: phase=%s waiting=%s", note, p.Status.Phase, waiting),
		note + ": FailedMount " + strings.ReplaceAll(eventMessages(t, a.env, kind+"-"+a.name, "FailedMount"), a.name, "NAME"),
	}, nil
}

// csiMounts lists the CSI mounts under the agent's root
// (/proc/self/mountinfo: mount point and its ro/rw), normalized by norm,
// sorted.
func csiMounts(t *testing.T, a *csiSBSAgent, norm *strings.Replacer) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[4], a.root+"/") || !strings.Contains(strings.TrimPrefix(f[4], a.root), "csi") {
			continue
		}
		ro, _, _ := strings.Cut(f[5], ",")
		out = append(out, norm.Replace(f[4])+" "+ro)
	}
	return sorted(out)
}

// volumeNorm replaces the agent's root, pod UIDs, inline volume IDs,
// staging hashes and name in what the agent's node shows.
func volumeNorm(a *csiSBSAgent, uids map[string]types.UID) *strings.Replacer {
	r := []string{a.root, "ROOT", inlineHandle(uids["inl"], "inline"), "csi-SHA256(UID(inl)+inline)"}
	for kind, uid := range uids {
		r = append(r, string(uid), "UID("+kind+")")
	}
	for _, kind := range csiVolClaims {
		r = append(r, stagingHash("vol"+kind+"-"+a.name), "SHA256(vol"+kind+")")
	}
	for _, c := range fsgClaims {
		r = append(r, stagingHash("vol"+c.kind+"-"+a.name), "SHA256(vol"+c.kind+")")
	}
	return strings.NewReplacer(append(r, a.name, "NAME")...)
}

// nodeVolumesInUse is the node's status.volumesInUse, the agent's name as
// NAME.
func nodeVolumesInUse(t *testing.T, a *csiSBSAgent) string {
	t.Helper()
	n, err := a.env.client.CoreV1().Nodes().Get(t.Context(), a.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(fmt.Sprint(n.Status.VolumesInUse), a.name, "NAME")
}

// observeVolumesRunning: what the pods see in their volumes, the
// ephemeral claim, volumesInUse and the CSI mounts while the pods run.
func observeVolumesRunning(t *testing.T, a *csiSBSAgent, uids map[string]types.UID) []string {
	t.Helper()
	pods := map[string]*v1.Pod{}
	for _, kind := range csiVolPods {
		pods[kind] = a.env.waitPod(t, kind+"-"+a.name, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}
	e := a.env
	out := []string{
		"data: /data/f=" + strings.TrimSpace(e.exec(t, pods["data"], "app", "cat", "/data/f")) +
			" stat /data=" + strings.TrimSpace(e.exec(t, pods["data"], "app", "stat", "-c", "%g %A", "/data")),
		"eph: /data/e=" + strings.TrimSpace(e.exec(t, pods["eph"], "app", "cat", "/data/e")),
		"inl: /data/i=" + strings.TrimSpace(e.exec(t, pods["inl"], "app", "cat", "/data/i")),
	}
	msg, code, err := e.tryExec(t, pods["ro"], "app", "touch", "/data/x")
	out = append(out, fmt.Sprintf("ro: touch exit=%d read-only=%v (%v)", code, strings.Contains(msg, "Read-only file system"), err))
	pvc, err := e.client.CoreV1().PersistentVolumeClaims("default").Get(t.Context(), "eph-"+a.name+"-scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, fmt.Sprintf("eph claim: controlled by its pod=%v volume=%s", metav1.IsControlledBy(pvc, pods["eph"]), strings.ReplaceAll(pvc.Spec.VolumeName, a.name, "NAME")))
	// The kubelet reports volumesInUse with its node status, every 10 s.
	var all []v1.UniqueVolumeName
	for _, kind := range csiVolClaims {
		all = append(all, unique("vol"+kind+"-"+a.name))
	}
	slices.Sort(all)
	want := strings.ReplaceAll(fmt.Sprint(all), a.name, "NAME")
	inUse := ""
	_ = pollUntil(t, 30*time.Second, func() bool { inUse = nodeVolumesInUse(t, a); return inUse == want })
	out = append(out, "running: volumesInUse="+inUse, "running: CSI mounts:")
	return append(out, csiMounts(t, a, volumeNorm(a, uids))...)
}

func unique(handle string) v1.UniqueVolumeName { return csi.UniqueVolumeName(csiTestDriver, handle) }

// pollUntil polls cond every 250 ms until it holds or timeout passes; it
// reports whether it held.
func pollUntil(t *testing.T, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-t.Context().Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// observeVolumesGone: once the pods are gone, the driver calls of each
// volume (but NodeGetVolumeStats), the CSI mounts left, and volumesInUse.
func observeVolumesGone(t *testing.T, a *csiSBSAgent, uids map[string]types.UID) []string {
	t.Helper()
	for _, kind := range append(slices.Clone(csiVolPods), "rwop2") {
		poll(t, 90*time.Second, "pod "+kind+"-"+a.name+" gone", func(ctx context.Context) (bool, error) {
			_, err := a.env.client.CoreV1().Pods("default").Get(ctx, kind+"-"+a.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	waitCall(t, a.drv, "NodeUnpublishVolume "+inlineHandle(uids["inl"], "inline")+" ")
	for _, kind := range csiVolClaims {
		waitCall(t, a.drv, "NodeUnstageVolume vol"+kind+"-"+a.name+" ")
	}
	for _, c := range fsgClaims {
		waitCall(t, a.extraDriver(c.driver), "NodeUnstageVolume vol"+c.kind+"-"+a.name+" ")
	}
	norm := volumeNorm(a, uids)
	out := append([]string{"after delete: driver calls:"}, callsByVolume(t, a.drv, norm)...)
	for _, d := range a.extra {
		out = append(out, "after delete: "+d.Name+" calls:")
		out = append(out, callsByVolume(t, d, norm)...)
	}
	modes, err := a.drv.AccessModes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range modes {
		modes[i] = norm.Replace(modes[i])
	}
	out = append(out, "access modes: "+strings.Join(slices.Compact(sorted(modes)), "; "))
	// Each agent removes a volume's directories after its last call
	// returns: give that step up to 20 s, so the comparison does not race
	// it.
	var left []string
	_ = pollUntil(t, 20*time.Second, func() bool { left = csiMounts(t, a, norm); return len(left) == 0 })
	out = append(out, fmt.Sprintf("after delete: CSI mounts left=%q", left))
	inUse := ""
	_ = pollUntil(t, 30*time.Second, func() bool { inUse = nodeVolumesInUse(t, a); return inUse == "[]" })
	return append(out, "after delete: volumesInUse="+inUse)
}

// observeDataKept: a new pod on the data claim reads the file the first
// wrote, left in group 0 by fsGroupChangePolicy OnRootMismatch.
func observeDataKept(t *testing.T, a *csiSBSAgent) []string {
	t.Helper()
	p := volumePod(a, "data2")
	p.Spec.Containers[0].Image = agenttest.BusyboxImage
	if _, err := a.env.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = a.env.waitPod(t, p.Name, 180*time.Second, "finished", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	return []string{"the data claim's next pod: " + string(p.Status.Phase)}
}

// observeDeregistered: the CSINode and the node once the drivers are
// gone. An agent takes a driver out of the CSINode object first and out
// of the node's nodeid annotation after (the annotation goes with the
// last driver), so this waits, up to 30 s, for both; an agent that never
// removes the annotation shows it.
func observeDeregistered(t *testing.T, client kubernetes.Interface, a *csiSBSAgent) []string {
	t.Helper()
	drivers, annotated := -1, true
	var zone string
	_ = pollUntil(t, 30*time.Second, func() bool {
		cn, err := client.StorageV1().CSINodes().Get(t.Context(), a.node, metav1.GetOptions{})
		if err == nil {
			drivers = len(cn.Spec.Drivers)
		}
		n, err := client.CoreV1().Nodes().Get(t.Context(), a.node, metav1.GetOptions{})
		if err == nil {
			_, annotated = n.Annotations[csi.NodeIDAnnotation]
			zone = n.Labels["topology.csi.nodekit.test/zone"]
		}
		return drivers == 0 && !annotated
	})
	return []string{fmt.Sprintf("driver gone: CSINode drivers=%d nodeid annotation=%v zone label=%q", drivers, annotated, zone)}
}
