package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
)

// The two drivers TestCSIVolumesSideBySide runs on each node beside the
// first, neither attached by a controller: mw advertises
// SINGLE_NODE_MULTI_WRITER and its CSIDriver leaves fsGroupPolicy to its
// default (ReadWriteOnceWithFSType); none has neither, and fsGroupPolicy
// None.
const (
	mwDriver   = "mw.csi.nodekit.test"
	noneDriver = "none.csi.nodekit.test"
)

// fsgClaims are the claims of the fsg pod, each on a static PV of fsType
// ext4 (PVKIND-AGENT, handle VOLKIND-AGENT): of the mw driver ReadWriteOnce,
// ReadWriteOncePod and ReadWriteMany, of the none driver ReadWriteOnce.
var fsgClaims = []struct {
	kind, driver string
	mode         v1.PersistentVolumeAccessMode
}{
	{"mwrwo", mwDriver, v1.ReadWriteOnce},
	{"mwrwop", mwDriver, v1.ReadWriteOncePod},
	{"mwrwx", mwDriver, v1.ReadWriteMany},
	{"none", noneDriver, v1.ReadWriteOnce},
}

// startExtraDrivers creates the CSIDriver objects of mwDriver and
// noneDriver, starts both drivers on each agent's node, waits for the
// agents' CSINode objects to list them, and creates the fsg pod's claims
// and PVs.
func startExtraDrivers(t *testing.T, client kubernetes.Interface, agents []*csiSBSAgent) {
	t.Helper()
	none := storagev1.NoneFSGroupPolicy
	for _, d := range []*storagev1.CSIDriver{
		{ObjectMeta: metav1.ObjectMeta{Name: mwDriver}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}},
		{ObjectMeta: metav1.ObjectMeta{Name: noneDriver}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), FSGroupPolicy: &none}},
	} {
		if _, err := client.StorageV1().CSIDrivers().Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		for _, o := range []csitest.Options{{Name: mwDriver, SingleNodeMultiWriter: true}, {Name: noneDriver}} {
			o.NodeID, o.RegistryDir = a.node+"-id", filepath.Join(a.root, "plugins_registry")
			a.extra = append(a.extra, csitest.Start(t, a.driverBin, o))
		}
	}
	for _, a := range agents {
		poll(t, 60*time.Second, a.name+": CSINode lists the three drivers", func(ctx context.Context) (bool, error) {
			cn, err := client.StorageV1().CSINodes().Get(ctx, a.node, metav1.GetOptions{})
			return err == nil && len(cn.Spec.Drivers) == 3, nil
		})
		for _, c := range fsgClaims {
			claim := c.kind + "-" + a.name
			createPV(t, a.env, "pv"+claim, "vol"+claim, "static", func(pv *v1.PersistentVolume) {
				pv.Spec.CSI.Driver, pv.Spec.CSI.FSType = c.driver, "ext4"
				pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{c.mode}
				pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim}
			})
			createClaim(t, a, claim, c.mode)
		}
	}
	for _, a := range agents {
		for _, c := range fsgClaims {
			waitClaimBound(t, a, c.kind+"-"+a.name)
		}
	}
}

// extraDriver is the agent's extra driver of the name.
func (a *csiSBSAgent) extraDriver(name string) *csitest.Process {
	for _, d := range a.extra {
		if d.Name == name {
			return d
		}
	}
	panic("no extra driver " + name)
}

// createClaim creates a claim of the static class with the access mode.
func createClaim(t *testing.T, a *csiSBSAgent, name string, mode v1.PersistentVolumeAccessMode) {
	t.Helper()
	spec := claimSpec("static")
	spec.AccessModes = []v1.PersistentVolumeAccessMode{mode}
	if _, err := a.env.client.CoreV1().PersistentVolumeClaims("default").Create(t.Context(),
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// fsgPod is the agent's pod with fsGroup 1234 and the claims of
// fsgClaims at /KIND.
func fsgPod(a *csiSBSAgent) *v1.Pod {
	p := simplePod("fsg-"+a.name, v1.RestartPolicyNever, "sleep 3600")
	p.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](1234)}
	for _, c := range fsgClaims {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c.kind, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c.kind + "-" + a.name}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: c.kind, MountPath: "/" + c.kind})
	}
	return p
}

// observeFSGroups: the group of each of the fsg pod's volumes (the
// driver's directories are root's: 0 where the node applied no fsGroup)
// and the access modes each extra driver got.
func observeFSGroups(t *testing.T, a *csiSBSAgent, uids map[string]types.UID) []string {
	t.Helper()
	p := a.env.waitPod(t, "fsg-"+a.name, 120*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	args := []string{"stat", "-c", "%n=%g"}
	for _, c := range fsgClaims {
		args = append(args, "/"+c.kind)
	}
	out := []string{"fsg: groups " + strings.Join(strings.Fields(a.env.exec(t, p, "app", args...)), " ")}
	return append(out, extraAccessModes(t, a, uids)...)
}

// extraAccessModes lists the access modes the extra drivers got, by
// driver, sorted, repeats dropped.
func extraAccessModes(t *testing.T, a *csiSBSAgent, uids map[string]types.UID) []string {
	t.Helper()
	norm := volumeNorm(a, uids)
	var out []string
	for _, d := range a.extra {
		modes, err := d.AccessModes()
		if err != nil {
			t.Fatal(err)
		}
		for i := range modes {
			modes[i] = norm.Replace(modes[i])
		}
		out = append(out, d.Name+" access modes: "+strings.Join(slices.Compact(sorted(modes)), "; "))
	}
	return out
}

// rwopInUse is upstream's error for a second pod of a ReadWriteOncePod
// volume.
const rwopInUse = "volume uses the ReadWriteOncePod access mode and is already in use by another pod"

// observeRWOPRefused creates on each node the pod rwop2 (bound by
// nodeName, as a pod the scheduler never saw) on the ReadWriteOncePod
// claim the running rwop pod uses, waits for its FailedMount event, and
// returns by agent rwop2's state and FailedMount events and rwop's
// state, with rwop2's UID added to uids.
func observeRWOPRefused(t *testing.T, agents []*csiSBSAgent, uids map[string]map[string]types.UID) map[string][]string {
	t.Helper()
	for _, a := range agents {
		p := volumePod(a, "rwop2")
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		created, err := a.env.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[a.name]["rwop2"] = created.UID
	}
	out := map[string][]string{}
	for _, a := range agents {
		poll(t, 60*time.Second, a.name+": rwop2's FailedMount", func(context.Context) (bool, error) {
			return strings.Contains(eventMessages(t, a.env, "rwop2-"+a.name, "FailedMount"), rwopInUse), nil
		})
	}
	for _, a := range agents {
		get := func(name string) *v1.Pod {
			p, err := a.env.client.CoreV1().Pods("default").Get(t.Context(), name+"-"+a.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		second, first := get("rwop2"), get("rwop")
		ms := strings.Split(strings.ReplaceAll(eventMessages(t, a.env, "rwop2-"+a.name, "FailedMount"), a.name, "NAME"), " | ")
		out[a.name] = []string{"rwop2 refused: " + podState(second), "rwop2 refused: FailedMount " + strings.Join(slices.Compact(ms), " | "),
			"rwop2 refused: rwop " + podState(first)}
	}
	return out
}

// podState sums up a pod's phase, conditions and app container state.
func podState(p *v1.Pod) string {
	var conds []string
	for _, c := range p.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	slices.Sort(conds)
	s := fmt.Sprintf("phase=%s conditions=%v", p.Status.Phase, conds)
	if c := containerStatus(p, "app"); c != nil {
		switch {
		case c.State.Waiting != nil:
			s += " waiting=" + c.State.Waiting.Reason
		case c.State.Running != nil:
			s += " running"
		case c.State.Terminated != nil:
			s += " terminated=" + c.State.Terminated.Reason
		}
		s += fmt.Sprintf(" ready=%v restarts=%d", c.Ready, c.RestartCount)
	}
	return s
}

// observeRWOPHandover, once rwop is deleted: rwop2 gets the volume and
// runs; then it is deleted too.
func observeRWOPHandover(t *testing.T, agents []*csiSBSAgent) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, a := range agents {
		p := a.env.waitPod(t, "rwop2-"+a.name, 120*time.Second, "Running once rwop is gone", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		out[a.name] = []string{"rwop2 after rwop's deletion: " + podState(p)}
	}
	for _, a := range agents {
		if err := a.env.client.CoreV1().Pods("default").Delete(t.Context(), "rwop2-"+a.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// callsByVolume lists the driver's calls (but NodeGetVolumeStats and
// NodeGetInfo) normalized by norm, by volume, each volume's in order (the
// volumes' operations run in parallel: their interleaving is not
// compared), the volumes sorted.
func callsByVolume(t *testing.T, drv *csitest.Process, norm *strings.Replacer) []string {
	t.Helper()
	byVolume := map[string][]string{}
	for _, c := range driverCalls(t, drv) {
		if f := strings.Fields(norm.Replace(c)); len(f) == 3 && f[0] != "NodeGetVolumeStats" && f[0] != "NodeGetInfo" {
			byVolume[f[1]] = append(byVolume[f[1]], f[0]+" "+f[2])
		}
	}
	var out []string
	for _, vol := range sorted(slices.Collect(maps.Keys(byVolume))) {
		out = append(out, "  "+vol+": "+strings.Join(byVolume[vol], "; "))
	}
	return out
}
