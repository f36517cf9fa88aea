package csi_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/volumemgr"
)

// rwopClaim is boundClaim with the claim and PV of the access modes.
func rwopClaim(claim, pvName, handle string, modes ...v1.PersistentVolumeAccessMode) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc, pv := boundClaim("default", claim, pvName, handle)
	pvc.Spec.AccessModes, pv.Spec.AccessModes = modes, modes
	return pvc, pv
}

const rwopInUse = "volume uses the ReadWriteOncePod access mode and is already in use by another pod"

// rwopPods adds two pods of the claim to m at once and reconciles: one
// gets the volume, the other upstream's FailedMount; it returns the UIDs
// of the first and the second.
func rwopPods(t *testing.T, e *env, m *volumemgr.Manager, ev *events, step, spec string, pod func(name, uid string) *v1.Pod) (types.UID, types.UID) {
	t.Helper()
	m.AddPod(pod("p1", "uid-1"))
	m.AddPod(pod("p2", "uid-2"))
	m.Reconcile(e.ctx)
	first, second := types.UID("uid-1"), types.UID("uid-2")
	if len(m.MountedVolumes(first)) == 0 {
		first, second = second, first
	}
	if len(m.MountedVolumes(first)) != 1 || len(m.MountedVolumes(second)) != 0 {
		t.Fatalf("mounted: uid-1 %+v, uid-2 %+v; want the volume in one pod only", m.MountedVolumes("uid-1"), m.MountedVolumes("uid-2"))
	}
	want := fmt.Sprintf("Warning FailedMount %s failed for volume %q : %s", step, spec, rwopInUse)
	if got := ev.all(); !slices.Equal(got, []string{want}) {
		t.Errorf("events %q, want %q", got, want)
	}
	return first, second
}

// A second pod of a ReadWriteOncePod claim (both added at once: their
// set-ups race) is refused with upstream's error until the first pod
// goes; the volume stays staged for it meanwhile, and it then only
// publishes.
func TestReadWriteOncePod(t *testing.T) {
	pvc, pv := rwopClaim("claim", "pv-1", "vol-1", v1.ReadWriteOncePod)
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	clk := testingclock.NewFakeClock(time.Now())
	ev := &events{}
	m := e.manager(clk, ev)
	pod := func(name, uid string) *v1.Pod { return podWith(name, uid, pvcVolume("claim")) }
	first, second := rwopPods(t, e, m, ev, "MountVolume.SetUp", "pv-1", pod)
	target := func(uid types.UID) string { return filepath.Join(volDir(e.root, string(uid), "pv-1"), "mount") }
	stage := "NodeStageVolume vol-1 " + stagingRel("vol-1")
	publish := func(uid types.UID) string {
		return "NodePublishVolume vol-1 " + strings.TrimPrefix(target(uid), e.root+"/")
	}
	unpublish := func(uid types.UID) string {
		return "NodeUnpublishVolume vol-1 " + strings.TrimPrefix(target(uid), e.root+"/")
	}
	if got := e.calls(); !slices.Equal(got, []string{stage, publish(first)}) {
		t.Errorf("calls %q, want the first pod's stage and publish only", got)
	}
	// Retried with back-off while the first pod runs; that pod keeps it.
	clk.Step(time.Second)
	m.Reconcile(e.ctx)
	if len(m.MountedVolumes(second)) != 0 || len(ev.all()) != 2 || !isMounted(t, target(first)) {
		t.Errorf("retry: second pod mounted %+v, events %q, first pod's target mounted %v", m.MountedVolumes(second), ev.all(), isMounted(t, target(first)))
	}

	m.RemovePod(first)
	m.Reconcile(e.ctx)
	if got := e.calls()[2:]; !slices.Equal(got, []string{unpublish(first)}) {
		t.Errorf("after the first pod left: %q, want its unpublish only (the volume stays staged for the second)", got)
	}
	clk.Step(5 * time.Second)
	m.Reconcile(e.ctx)
	if mv := m.MountedVolumes(second); len(mv) != 1 || !isMounted(t, target(second)) {
		t.Fatalf("second pod after the first left: mounted %+v", mv)
	}
	if got := e.calls()[3:]; !slices.Equal(got, []string{publish(second)}) {
		t.Errorf("second pod's set-up: %q, want its publish only", got)
	}
	m.RemovePod(second)
	m.Reconcile(e.ctx)
	if got := e.calls()[4:]; !slices.Equal(got, []string{unpublish(second), "NodeUnstageVolume vol-1 " + stagingRel("vol-1")}) {
		t.Errorf("after the second pod left: %q, want its unpublish and the unstage", got)
	}
}

// The waiting pod of a ReadWriteOncePod claim leaves before it got the
// volume, after the first: the volume is unstaged then.
func TestReadWriteOncePodWaiterLeaves(t *testing.T) {
	pvc, pv := rwopClaim("claim", "pv-1", "vol-1", v1.ReadWriteOncePod)
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, ev)
	first, second := rwopPods(t, e, m, ev, "MountVolume.SetUp", "pv-1", func(name, uid string) *v1.Pod { return podWith(name, uid, pvcVolume("claim")) })
	m.RemovePod(first)
	m.Reconcile(e.ctx)
	if got := e.calls(); len(got) != 3 || !strings.HasPrefix(got[2], "NodeUnpublishVolume") {
		t.Errorf("calls %q, want stage, publish, unpublish", got)
	}
	m.RemovePod(second)
	clk.Step(time.Second) // past the failed set-up's back-off
	m.Reconcile(e.ctx)
	if got := e.calls()[3:]; !slices.Equal(got, []string{"NodeUnstageVolume vol-1 " + stagingRel("vol-1")}) {
		t.Errorf("after the waiting pod left: %q, want the unstage", got)
	}
}

// A raw block ReadWriteOncePod volume is refused at upstream's
// MapVolume.SetUpDevice.
func TestReadWriteOncePodBlock(t *testing.T) {
	pvc, pv := blockClaim("claim", "pv-b", "vol-b")
	pvc.Spec.AccessModes, pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, ev)
	first, second := rwopPods(t, e, m, ev, "MapVolume.SetUpDevice", "pv-b", func(name, uid string) *v1.Pod { return devicePod(name, uid, pvcVolume("claim")) })
	m.RemovePod(second)
	clk.Step(time.Second)
	m.Reconcile(e.ctx)
	m.RemovePod(first)
	m.Reconcile(e.ctx)
	var publishes []string
	for _, c := range e.calls() {
		if strings.HasPrefix(c, "NodePublishVolume") || strings.HasPrefix(c, "NodeUnpublishVolume") {
			publishes = append(publishes, c)
		}
	}
	if len(publishes) != 2 || !strings.HasSuffix(publishes[0], "/"+string(first)) || !strings.HasSuffix(publishes[1], "/"+string(first)) {
		t.Errorf("publish calls %q, want the first pod's publish and unpublish only", publishes)
	}
}

// Two pods of a PV with ReadWriteOncePod and another access mode both
// get it: upstream cannot tell which mode a pod means.
func TestReadWriteOncePodAmongModes(t *testing.T) {
	pvc, pv := rwopClaim("claim", "pv-1", "vol-1", v1.ReadWriteOncePod, v1.ReadWriteOnce)
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	m := e.manager(testingclock.NewFakeClock(time.Now()), ev)
	m.AddPod(podWith("p1", "uid-1", pvcVolume("claim")))
	m.AddPod(podWith("p2", "uid-2", pvcVolume("claim")))
	m.Reconcile(e.ctx)
	if len(m.MountedVolumes("uid-1")) != 1 || len(m.MountedVolumes("uid-2")) != 1 || len(ev.all()) != 0 {
		t.Errorf("mounted %+v and %+v, events %q; want both pods mounted", m.MountedVolumes("uid-1"), m.MountedVolumes("uid-2"), ev.all())
	}
	m.RemovePod("uid-1")
	m.RemovePod("uid-2")
	m.Reconcile(e.ctx)
}

// The driver gets the access modes upstream sends: with
// SINGLE_NODE_MULTI_WRITER, ReadWriteOnce (and an inline volume) as
// SINGLE_NODE_MULTI_WRITER and ReadWriteOncePod as
// SINGLE_NODE_SINGLE_WRITER; without it, both SINGLE_NODE_WRITER.
func TestDriverAccessModes(t *testing.T) {
	for _, c := range []struct {
		multiWriter bool
		rwo, rwop   string
	}{
		{false, "SINGLE_NODE_WRITER", "SINGLE_NODE_WRITER"},
		{true, "SINGLE_NODE_MULTI_WRITER", "SINGLE_NODE_SINGLE_WRITER"},
	} {
		t.Run(fmt.Sprintf("multiWriter=%v", c.multiWriter), func(t *testing.T) {
			rwoClaim, rwoPV := rwopClaim("rwo", "pv-rwo", "vol-rwo", v1.ReadWriteOnce)
			rwopC, rwopPV := rwopClaim("rwop", "pv-rwop", "vol-rwop", v1.ReadWriteOncePod)
			e := newEnvWith(t, csitest.Options{SingleNodeMultiWriter: c.multiWriter}, rwoClaim, rwoPV, rwopC, rwopPV,
				csiDriver(storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral))
			m := e.manager(testingclock.NewFakeClock(time.Now()), &events{})
			inline := v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driverName}}}
			m.AddPod(podWith("p1", "uid-1", pvcVolume("rwo")))
			m.AddPod(podWith("p2", "uid-2", pvcVolume("rwop")))
			m.AddPod(podWith("p3", "uid-3", inline))
			m.Reconcile(e.ctx)
			got, err := e.drv.AccessModes()
			if err != nil {
				t.Fatal(err)
			}
			inlineID := strings.Fields(e.calls()[slices.IndexFunc(e.calls(), func(c string) bool { return strings.Contains(c, "uid-3") })])[1]
			want := []string{"NodePublishVolume vol-rwo " + c.rwo, "NodePublishVolume vol-rwop " + c.rwop, "NodeStageVolume vol-rwo " + c.rwo,
				"NodeStageVolume vol-rwop " + c.rwop, "NodePublishVolume " + inlineID + " " + c.rwo}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("access modes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, uid := range []types.UID{"uid-1", "uid-2", "uid-3"} {
				m.RemovePod(uid)
			}
			m.Reconcile(e.ctx)
		})
	}
}
