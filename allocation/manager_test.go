package allocation_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/allocation"
)

// upstreamCheckpoint was written by kubelet v1.37.2's allocation state.
const upstreamCheckpoint = `{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}`

func TestStoreReadsUpstreamCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, allocation.AllocatedFile), []byte(upstreamCheckpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := allocation.OpenStore(dir, allocation.AllocatedFile)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	p, ok := s.Get("pod1")
	if !ok {
		t.Fatal("pod1 not found in upstream's checkpoint")
	}
	r := p.ContainerResources["container1"].Requests
	if r.Cpu().String() != "1Ki" || r.Memory().String() != "1Ki" {
		t.Fatalf("container1 requests = %v, want cpu and memory 1Ki", r)
	}
	// Written back and read again: the same, with a valid checksum.
	if err := s.Set("pod2", allocation.ForPod(podOf("pod2", ctr("c", reqs("cpu=1", "cpu=2"))))); err != nil {
		t.Fatal(err)
	}
	s2, err := allocation.OpenStore(dir, allocation.AllocatedFile)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	for _, uid := range []types.UID{"pod1", "pod2"} {
		if _, ok := s2.Get(uid); !ok {
			t.Errorf("%s lost across reopen", uid)
		}
	}
}

func TestStoreRefusesCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	bad := []byte(`{"data":"{\"entries\":{}}","checksum":1}`)
	if err := os.WriteFile(filepath.Join(dir, allocation.ActuatedFile), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := allocation.OpenStore(dir, allocation.ActuatedFile); !errors.Is(err, allocation.ErrCorruptCheckpoint) {
		t.Fatalf("OpenStore = %v, want ErrCorruptCheckpoint", err)
	}
}

func findCond(st *v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func TestManagerResizeFlow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	rec := &recorder{usage: map[string]uint64{}}
	var pods []*v1.Pod
	newManager := func() *allocation.Manager {
		m, err := allocation.New(allocation.Config{
			RootDir: dir, Fit: fitOn("cpu=2,memory=4Gi"), Pods: func() []*v1.Pod { return pods },
			Containers: rec, PodCgroup: rec, Usage: rec, Clock: clk,
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := newManager()
	pod := podOf("p", ctr("c", reqs("cpu=500m", "cpu=500m")))
	hog := podOf("hog", ctr("h", reqs("cpu=1", "")))
	pods = []*v1.Pod{pod, hog}
	for _, p := range pods {
		if _, err := m.Allocate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// Too big beside hog: deferred, the pod runs at its allocation.
	resized := pod.DeepCopy()
	resized.Generation = 2
	resized.Spec.Containers[0].Resources = reqs("cpu=1500m", "cpu=1500m")
	got, err := m.Allocate(ctx, resized)
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Spec.Containers[0].Resources.Limits.Cpu(); q.MilliValue() != 500 {
		t.Fatalf("deferred pod runs with cpu limit %v, want the allocated 500m", q)
	}
	st := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	m.SetStatus(ctx, resized, nil, st)
	if c := findCond(st, v1.PodResizePending); c == nil || c.Reason != v1.PodReasonDeferred || c.ObservedGeneration != 2 {
		t.Fatalf("PodResizePending = %+v, want Deferred at generation 2", c)
	}

	// The hog leaves: the next decision allocates it (and the allocation
	// survives a restart of the agent before it is actuated).
	pods = []*v1.Pod{resized}
	if err := m.Forget(hog.UID); err != nil {
		t.Fatal(err)
	}
	select {
	case uid := <-m.Retries():
		if uid != resized.UID {
			t.Fatalf("retry of %s, want the deferred pod %s", uid, resized.UID)
		}
	default:
		t.Fatal("the hog left and no retry of the deferred resize was queued")
	}
	if _, err := m.Allocate(ctx, resized); err != nil {
		t.Fatal(err)
	}
	m = newManager()
	got, err = m.Allocate(ctx, resized)
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Spec.Containers[0].Resources.Limits.Cpu(); q.MilliValue() != 1500 {
		t.Fatalf("after the hog left and a restart, cpu limit %v, want 1500m", q)
	}
	restart, _, err := m.Actuate(ctx, got, running(got, "c"))
	if err != nil || len(restart) != 0 {
		t.Fatalf("Actuate = %v, %v", restart, err)
	}
	if len(rec.calls) == 0 {
		t.Fatal("Actuate applied nothing")
	}
	st = &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	m.SetStatus(ctx, got, nil, st)
	if c := findCond(st, v1.PodResizePending); c != nil {
		t.Fatalf("PodResizePending %+v left after the resize", c)
	}
	if c := findCond(st, v1.PodResizeInProgress); c != nil {
		t.Fatalf("PodResizeInProgress %+v left after actuation", c)
	}
	cs := st.ContainerStatuses[0]
	if cs.AllocatedResources.Cpu().MilliValue() != 1500 || cs.Resources == nil || cs.Resources.Limits.Cpu().MilliValue() != 1500 {
		t.Fatalf("container status allocatedResources=%v resources=%v, want cpu 1500m", cs.AllocatedResources, cs.Resources)
	}
}

func TestManagerActuationErrorIsInProgressError(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{failOn: "id-c"}
	m, err := allocation.New(allocation.Config{Containers: rec, Clock: clocktesting.NewFakePassiveClock(time.Unix(1, 0))})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf("p", ctr("c", reqs("cpu=100m", "")))
	if _, err := m.Allocate(ctx, pod); err != nil {
		t.Fatal(err)
	}
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources = reqs("cpu=200m", "")
	got, _ := m.Allocate(ctx, resized)
	if _, _, err := m.Actuate(ctx, got, running(got, "c")); err == nil {
		t.Fatal("Actuate succeeded with a refusing runtime")
	}
	st := &v1.PodStatus{}
	m.SetStatus(ctx, got, nil, st)
	c := findCond(st, v1.PodResizeInProgress)
	if c == nil || c.Reason != v1.PodReasonError || c.Message == "" {
		t.Fatalf("PodResizeInProgress = %+v, want reason Error with a message", c)
	}
}

func TestSetStatusPlacesConditionsAsUpstream(t *testing.T) {
	ctx := context.Background()
	m, err := allocation.New(allocation.Config{Containers: &recorder{}, Fit: fitOn("cpu=1,memory=1Gi"), Clock: clocktesting.NewFakePassiveClock(time.Unix(1, 0))})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf("p", ctr("c", reqs("cpu=100m", "")))
	if _, err := m.Allocate(ctx, pod); err != nil {
		t.Fatal(err)
	}
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources = reqs("cpu=2", "")
	if _, err := m.Allocate(ctx, resized); err != nil {
		t.Fatal(err)
	}
	st := &v1.PodStatus{Conditions: []v1.PodCondition{
		{Type: "example.com/gate"}, {Type: v1.PodResizePending, Reason: "stale"},
		{Type: v1.PodReadyToStartContainers}, {Type: v1.PodReady},
	}}
	m.SetStatus(ctx, resized, nil, st)
	var got []v1.PodConditionType
	for _, c := range st.Conditions {
		got = append(got, c.Type)
	}
	want := []v1.PodConditionType{"example.com/gate", v1.PodResizePending, v1.PodReadyToStartContainers, v1.PodReady}
	if len(got) != len(want) {
		t.Fatalf("conditions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("conditions %v, want %v", got, want)
		}
	}
	if c := findCond(st, v1.PodResizePending); c.Reason != v1.PodReasonDeferred {
		t.Fatalf("PodResizePending reason %q, want Deferred (2 cpu on a 1-cpu node, as kubelet v1.37)", c.Reason)
	}
}

func TestRemoveOrphansSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := allocation.Config{RootDir: dir, Containers: &recorder{}}
	m, err := allocation.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"stays", "gone"} {
		if _, err := m.Allocate(ctx, podOf(uid, ctr("c", reqs("cpu=100m", "")))); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.RemoveOrphans(map[types.UID]bool{"stays": true}); err != nil {
		t.Fatal(err)
	}
	m, err = allocation.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Allocated("stays"); !ok {
		t.Error("the kept pod's allocation is gone")
	}
	for _, get := range []func(types.UID) (allocation.PodResources, bool){m.Allocated, m.Actuated} {
		if _, ok := get("gone"); ok {
			t.Error("an orphan's record survived RemoveOrphans and a reopen")
		}
	}
}

// TestManagerPodLevelResize: a resize of spec.resources is allocated,
// actuated (pod cgroup and the container inheriting the limits), and the
// status reports the pod's allocatedResources and resources as upstream:
// at the allocation while the resize is pending, at the applied values
// while it runs, and the container's resources without the limits it
// inherits.
func TestManagerPodLevelResize(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{usage: map[string]uint64{"id-c": 1 << 20}, podUsage: 2 << 20}
	m, err := allocation.New(allocation.Config{
		Fit: fitOn("cpu=2,memory=4Gi"), Containers: rec, PodCgroup: rec, Usage: rec, PodUsage: rec,
		Clock: clocktesting.NewFakePassiveClock(time.Unix(1, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf("p", ctr("c", v1.ResourceRequirements{}))
	pod.Spec.Resources = podLevel("cpu=200m,memory=64Mi", "cpu=400m,memory=128Mi")
	if _, err := m.Allocate(ctx, pod); err != nil {
		t.Fatal(err)
	}
	runningStatus := func() *v1.PodStatus {
		return &v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	}
	st := &v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "c"}}}
	m.SetStatus(ctx, pod, nil, st)
	if want := list("cpu=200m,memory=64Mi"); !apiequality.Semantic.DeepEqual(st.AllocatedResources, want) {
		t.Errorf("pending pod's allocatedResources = %v, want %v", st.AllocatedResources, want)
	}
	if !apiequality.Semantic.DeepEqual(st.Resources, pod.Spec.Resources) {
		t.Errorf("pending pod's resources = %v, want spec.resources %v", st.Resources, pod.Spec.Resources)
	}

	resized := pod.DeepCopy()
	resized.Generation = 2
	resized.Spec.Resources = podLevel("cpu=300m,memory=96Mi", "cpu=600m,memory=192Mi")
	got, err := m.Allocate(ctx, resized)
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec.Resources, resized.Spec.Resources) {
		t.Fatalf("allocated pod-level resources %v, want the resize", got.Spec.Resources)
	}
	// Allocated, not yet actuated: the running pod reports what its
	// cgroup has, and PodResizeInProgress.
	st = runningStatus()
	m.SetStatus(ctx, runningPod(got), nil, st)
	if c := findCond(st, v1.PodResizeInProgress); c == nil || c.ObservedGeneration != 2 {
		t.Fatalf("PodResizeInProgress = %+v, want one at generation 2", c)
	}
	if q := st.Resources.Limits.Memory(); q.Value() != 128<<20 {
		t.Errorf("running pod's resources.limits.memory before actuation = %v, want the applied 128Mi", q)
	}
	if want := list("cpu=300m,memory=96Mi"); !apiequality.Semantic.DeepEqual(st.AllocatedResources, want) {
		t.Errorf("allocatedResources = %v, want %v", st.AllocatedResources, want)
	}

	restart, changed, err := m.Actuate(ctx, got, running(got, "c"))
	if err != nil || !changed || len(restart) != 0 {
		t.Fatalf("Actuate = %v, %v, %v; want changed, no restart", restart, changed, err)
	}
	want := []string{
		"pod cpu=400m mem=192Mi", "id-c cpu=0/400m mem=0/192Mi",
		"pod cpu=600m mem=192Mi", "id-c cpu=0/600m mem=0/192Mi",
	}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls:\n%q\nwant\n%q", rec.calls, want)
	}
	st = runningStatus()
	m.SetStatus(ctx, got, nil, st)
	if c := findCond(st, v1.PodResizeInProgress); c != nil {
		t.Fatalf("PodResizeInProgress %+v left after the actuation", c)
	}
	if !apiequality.Semantic.DeepEqual(st.Resources, resized.Spec.Resources) {
		t.Errorf("resources = %v, want %v", st.Resources, resized.Spec.Resources)
	}
	if cs := st.ContainerStatuses[0]; cs.Resources == nil || len(cs.Resources.Limits) != 0 || len(cs.Resources.Requests) != 0 {
		t.Errorf("container resources = %v, want none (the limits it inherits are the pod's)", cs.Resources)
	}
}
