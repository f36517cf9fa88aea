package main

import (
	"context"
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/cgroupmgr"
)

// recordingDriver is a cgroupmgr.Driver keeping cgroups in memory and
// the order of the Apply calls with the cpu shares written.
type recordingDriver struct {
	cgroups map[string]bool
	applied []string // "name shares"
}

var _ cgroupmgr.Driver = (*recordingDriver)(nil)

func (d *recordingDriver) Apply(_ context.Context, name cgroupmgr.CgroupName, rc *cgroupmgr.ResourceConfig) error {
	d.cgroups[name.ToCgroupfs()] = true
	shares := "-"
	if rc != nil && rc.CPUShares != nil {
		shares = fmt.Sprint(*rc.CPUShares)
	}
	d.applied = append(d.applied, name.ToCgroupfs()+" "+shares)
	return nil
}

func (d *recordingDriver) Exists(_ context.Context, name cgroupmgr.CgroupName) (bool, error) {
	return d.cgroups[name.ToCgroupfs()], nil
}

func (d *recordingDriver) Children(context.Context, cgroupmgr.CgroupName) ([]string, error) {
	return nil, nil
}

func (d *recordingDriver) Destroy(_ context.Context, name cgroupmgr.CgroupName) error {
	delete(d.cgroups, name.ToCgroupfs())
	return nil
}

// A new Burstable pod: the burstable tier gets its shares (upstream's
// SyncPod calls UpdateQOSCgroups before it creates a pod's cgroup), then
// the pod's cgroup is made; a pod whose cgroup exists leaves the tiers
// and its cgroup as they are (upstream's EnsureExists); a new pod that
// changes no tier's size writes its own cgroup alone.
func TestSandboxSizesQOSFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	d := &recordingDriver{cgroups: map[string]bool{"/": true}}
	m, err := cgroupmgr.New(cgroupmgr.Config{Backend: d, CgroupsPerQOS: true,
		Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "default", UID: types.UID("1234")},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}}}}}
	pc := &podCgroups{m: m}
	next := func(context.Context, *v1.Pod) (nodekit.SandboxOptions, error) { return nodekit.SandboxOptions{}, nil }
	sandbox := pc.sandbox(func() []*v1.Pod { return []*v1.Pod{pod} }, next)
	d.applied = nil
	o, err := sandbox(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if o.CgroupParent != "/kubepods/burstable/pod1234" {
		t.Errorf("CgroupParent = %q", o.CgroupParent)
	}
	want := []string{"/kubepods/burstable 102", "/kubepods/burstable/pod1234 102"}
	if i := indexOf(d.applied, want[0]); i < 0 || indexOf(d.applied, want[1]) < i {
		t.Errorf("applied %q, want %q before %q", d.applied, want[0], want[1])
	}
	// The pod, resized: its existing cgroup is left to the resize.
	d.applied = nil
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("50m")
	o, err = sandbox(ctx, resized)
	if err != nil {
		t.Fatal(err)
	}
	if o.CgroupParent != "/kubepods/burstable/pod1234" {
		t.Errorf("a pod whose cgroup exists: CgroupParent = %q", o.CgroupParent)
	}
	if len(d.applied) != 0 {
		t.Errorf("a pod whose cgroup exists: applied %q, want nothing written", d.applied)
	}
	// A new BestEffort pod changes no tier's size: only its own cgroup
	// is written (EnsureQOS); housekeeping's UpdateQOS writes the tiers.
	d.applied = nil
	bestEffort := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "be", Namespace: "default", UID: types.UID("5678")},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	sandbox = pc.sandbox(func() []*v1.Pod { return []*v1.Pod{pod, bestEffort} }, next)
	if _, err := sandbox(ctx, bestEffort); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/kubepods/besteffort/pod5678 2"}; !slices.Equal(d.applied, want) {
		t.Errorf("a new BestEffort pod: applied %q, want %q", d.applied, want)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
