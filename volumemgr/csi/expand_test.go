package csi_test

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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/volumemgr"
)

// sizedClaim is boundClaim with the PV's capacity and the claim's
// status.capacity both at size, as the PV binder leaves them.
func sizedClaim(claim, pvName, handle, size string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc, pv := boundClaim("default", claim, pvName, handle)
	q := resource.MustParse(size)
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: q}
	pvc.Spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: q}
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: q}
	return pvc, pv
}

// resize does the resizer's part: the PV grows to size, and the claim's
// status is changed by edit.
func resize(t *testing.T, e *env, pvName, claim, size string, edit func(*v1.PersistentVolumeClaim)) {
	t.Helper()
	ctx := context.Background()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse(size)
	if _, err := e.cs.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
	edit(pvc)
	if _, err := e.cs.CoreV1().PersistentVolumeClaims("default").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) claim(name string) *v1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pvc
}

func (e *env) expansions() []string {
	e.t.Helper()
	lines, err := e.drv.Expansions()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, l := range lines {
		out = append(out, strings.ReplaceAll(l, e.root+"/", ""))
	}
	return out
}

// TestOnlineExpansion: once the resizer grew the PV (the claim marked
// FileSystemResizePending), the next refresh of the mounted volume calls
// NodeExpandVolume on the published path and the claim's status shows the
// new capacity without the condition; with allocatedResources (expansion
// recovery) the claim is expanded to them when marked NodeResizePending,
// and its allocatedResourceStatuses entry goes.
func TestOnlineExpansion(t *testing.T) {
	pvc, pv := sizedClaim("claim", "pv-1", "vol-1", "1Gi")
	e := newEnvWith(t, csitest.Options{ExpandVolume: true}, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, ev)
	pod := podWith("p1", "uid-1", pvcVolume("claim"))
	pod.Spec.NodeName = nodeName
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	if got := e.expansions(); len(got) != 0 {
		t.Fatalf("expansions before any resize: %q", got)
	}
	target := "pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"

	resize(t, e, "pv-1", "claim", "2Gi", func(c *v1.PersistentVolumeClaim) {
		c.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}}
	})
	clk.Step(2 * volumemgr.DefaultRefreshPeriod)
	m.Reconcile(e.ctx)
	if got, want := e.expansions(), []string{fmt.Sprintf("vol-1 %s %d", target, int64(2<<30))}; !slices.Equal(got, want) {
		t.Fatalf("expansions %q, want %q", got, want)
	}
	c := e.claim("claim")
	if got := c.Status.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 || len(c.Status.Conditions) != 0 {
		t.Errorf("claim status after expansion: capacity %s, conditions %+v", got.String(), c.Status.Conditions)
	}
	wantEvent := `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1" ` + nodeName
	if n := len(slices.DeleteFunc(e.events.all(), func(s string) bool { return s != wantEvent })); n != 2 {
		t.Errorf("events %q, want %q twice (pod and claim)", e.events.all(), wantEvent)
	}
	// Only expansion on that refresh: no second publish.
	if n := len(slices.DeleteFunc(e.calls(), func(s string) bool { return !strings.HasPrefix(s, "NodePublishVolume") })); n != 1 {
		t.Errorf("%d publishes, want 1: %q", n, e.calls())
	}

	// Expansion recovery: the new size is allocatedResources'.
	resize(t, e, "pv-1", "claim", "3Gi", func(c *v1.PersistentVolumeClaim) {
		c.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("3Gi")}
		c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	})
	clk.Step(2 * volumemgr.DefaultRefreshPeriod)
	m.Reconcile(e.ctx)
	if got := e.expansions(); len(got) != 2 || got[1] != fmt.Sprintf("vol-1 %s %d", target, int64(3<<30)) {
		t.Fatalf("expansions %q, want a second one to 3Gi", got)
	}
	c = e.claim("claim")
	if got := c.Status.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("3Gi")) != 0 || c.Status.AllocatedResourceStatuses != nil {
		t.Errorf("claim status after recovery expansion: capacity %s, allocatedResourceStatuses %v", got.String(), c.Status.AllocatedResourceStatuses)
	}
	// Nothing more to do: no call at the next refresh.
	clk.Step(2 * volumemgr.DefaultRefreshPeriod)
	m.Reconcile(e.ctx)
	if got := e.expansions(); len(got) != 2 {
		t.Errorf("expansions %q after the claim caught up", got)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}

// TestExpansionFailure: a driver failing NodeExpandVolume fails the
// refresh (a FailedMount event), and with expansion recovery the claim
// gets the NodeResizeError condition; the next refresh, the driver
// recovered, expands.
func TestExpansionFailure(t *testing.T) {
	pvc, pv := sizedClaim("claim", "pv-1", "vol-1", "1Gi")
	e := newEnvWith(t, csitest.Options{ExpandVolume: true}, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	ev := &events{}
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, ev)
	m.AddPod(podWith("p1", "uid-1", pvcVolume("claim")))
	m.Reconcile(e.ctx)
	if err := e.drv.Fail("NodeExpandVolume", "Internal"); err != nil {
		t.Fatal(err)
	}
	resize(t, e, "pv-1", "claim", "2Gi", func(c *v1.PersistentVolumeClaim) {
		c.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
		c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	})
	clk.Step(2 * volumemgr.DefaultRefreshPeriod)
	m.Reconcile(e.ctx)
	c := e.claim("claim")
	if len(c.Status.Conditions) != 1 || c.Status.Conditions[0].Type != v1.PersistentVolumeClaimNodeResizeError ||
		c.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("claim status after a failed expansion: %+v", c.Status)
	}
	if !slices.ContainsFunc(ev.all(), func(s string) bool { return strings.Contains(s, "injected failure of NodeExpandVolume") }) {
		t.Errorf("events %q, want the failure", ev.all())
	}
	if err := e.drv.Recover(); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Minute)
	m.Reconcile(e.ctx)
	c = e.claim("claim")
	if got := c.Status.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 || len(c.Status.Conditions) != 0 || c.Status.AllocatedResourceStatuses != nil {
		t.Errorf("claim status after the retry: %+v", c.Status)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}

// TestNoExpandCapability: without EXPAND_VOLUME the node leaves the claim
// alone, as upstream (the resizer alone finishes).
func TestNoExpandCapability(t *testing.T) {
	pvc, pv := sizedClaim("claim", "pv-1", "vol-1", "1Gi")
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	e := newEnv(t, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	m := e.manager(testingclock.NewFakeClock(time.Now()), &events{})
	m.AddPod(podWith("p1", "uid-1", pvcVolume("claim")))
	m.Reconcile(e.ctx)
	if got := e.expansions(); len(got) != 0 {
		t.Errorf("expansions %q", got)
	}
	if got := e.claim("claim").Status.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("claim capacity %s", got.String())
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}

// TestBlockExpansion: a block volume's NodeExpandVolume gets the device
// file (the publish path) and a block capability; the driver grows its
// loop device.
func TestBlockExpansion(t *testing.T) {
	pvc, pv := blockClaim("claim", "pv-b", "vol-b")
	q := resource.MustParse("16Mi")
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: q}
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: q}
	pvc.Spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: q}
	e := newEnvWith(t, csitest.Options{ExpandVolume: true}, pvc, pv, csiDriver(storagev1.VolumeLifecyclePersistent))
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, &events{})
	m.AddPod(devicePod("p1", "uid-1", pvcVolume("claim")))
	m.Reconcile(e.ctx)
	resize(t, e, "pv-b", "claim", "32Mi", func(*v1.PersistentVolumeClaim) {})
	clk.Step(2 * volumemgr.DefaultRefreshPeriod)
	m.Reconcile(e.ctx)
	want := fmt.Sprintf("vol-b plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-1 %d", int64(32<<20))
	if got := e.expansions(); !slices.Equal(got, []string{want}) {
		t.Fatalf("expansions %q, want %q", got, want)
	}
	size, err := deviceSize(filepath.Join(e.root, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv-b"))
	if err != nil || size != 32<<20 {
		t.Errorf("device size %d (%v), want %d", size, err, 32<<20)
	}
	m.RemovePod("uid-1")
	m.Reconcile(e.ctx)
}
