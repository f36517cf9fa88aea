package syncloop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/allocation"
	"github.com/nodekit/nodekit/syncloop"
)

// resizeRecorder is the runtime's in-place update: it records each call.
type resizeRecorder struct {
	mu    sync.Mutex
	calls map[nodekit.ContainerID][]v1.ResourceRequirements
}

func (r *resizeRecorder) ResizeContainer(_ context.Context, id nodekit.ContainerID, res v1.ResourceRequirements) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[id] = append(r.calls[id], res)
	return nil
}

var _ allocation.ContainerUpdater = (*resizeRecorder)(nil)

func withResources(p *v1.Pod, name, cpu, mem string, restartOnMemory bool) {
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.Name != name {
			continue
		}
		l := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		c.Resources = v1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
		if restartOnMemory {
			c.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
		}
	}
}

func TestInPlaceResize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		rec := &resizeRecorder{calls: map[nodekit.ContainerID][]v1.ResourceRequirements{}}
		store := syncloop.NewPodStore() // built first: the resizer reads the loop's pods through it
		m, err := allocation.New(allocation.Config{
			Containers: rec, Pods: store.ActivePods,
		})
		if err != nil {
			t.Fatal(err)
		}
		n := startNodeWith(t, rt, rt, func(c *syncloop.Config) { c.Pods, c.Resizer = store, m })
		p := pod("u1", v1.RestartPolicyAlways, "inplace", "restarts")
		withResources(p, "inplace", "100m", "64Mi", false)
		withResources(p, "restarts", "100m", "64Mi", true)
		n.send(nodekit.ADD, p)
		settle(3 * time.Second)
		before := n.status.get(t, "u1")
		inplaceID := containerState(t, before, "inplace").ContainerID

		resized := p.DeepCopy()
		resized.Generation = 2
		withResources(resized, "inplace", "200m", "128Mi", false)
		withResources(resized, "restarts", "100m", "128Mi", true)
		n.send(nodekit.UPDATE, resized)
		settle(3 * time.Second)

		s := n.status.get(t, "u1")
		in, re := containerState(t, s, "inplace"), containerState(t, s, "restarts")
		if in.RestartCount != 0 || in.ContainerID != inplaceID {
			t.Errorf("in-place container restarted: count %d, id %s (was %s)", in.RestartCount, in.ContainerID, inplaceID)
		}
		if re.RestartCount != 1 || re.State.Running == nil {
			t.Errorf("RestartContainer container: restartCount %d, running %v; want restarted once and running", re.RestartCount, re.State.Running != nil)
		}
		rec.mu.Lock()
		var got []v1.ResourceRequirements
		for id, calls := range rec.calls {
			if id.String() == inplaceID {
				got = calls
			}
		}
		count := len(rec.calls)
		rec.mu.Unlock()
		if count != 1 || len(got) != 2 {
			t.Fatalf("updates: %d containers, %d calls for inplace; want memory then cpu for inplace only", count, len(got))
		}
		if lim := got[1].Limits; lim.Cpu().MilliValue() != 200 || lim.Memory().Value() != 128<<20 {
			t.Errorf("last update of inplace = %v, want cpu 200m memory 128Mi", lim)
		}
		if a := in.AllocatedResources; a.Cpu().MilliValue() != 200 {
			t.Errorf("allocatedResources = %v, want cpu 200m", a)
		}
		if r := in.Resources; r == nil || r.Limits.Memory().Value() != 128<<20 {
			t.Errorf("resources = %v, want the memory limit applied (128Mi)", r)
		}
		for _, c := range s.Conditions {
			if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
				t.Errorf("condition %s left after the resize: %+v", c.Type, c)
			}
		}
	})
}

// strictPodCgroup is the pod cgroup as cgroup v1's CPU controller keeps
// it: its CPU quota cannot go below that of a container running in it
// (the kernel answers EINVAL). It fails such an update, and records it.
type strictPodCgroup struct {
	rt      *agenttest.FakeRuntime
	mu      sync.Mutex
	calls   int
	refused []string
}

func (c *strictPodCgroup) EnsurePod(ctx context.Context, pod *v1.Pod) (string, error) {
	rs, err := c.rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	var podLimit int64
	for _, ctr := range pod.Spec.Containers {
		podLimit += ctr.Resources.Limits.Cpu().MilliValue()
	}
	for _, cs := range rs.Containers {
		if cs.State == nodekit.StateRunning && cs.Name == "restarts" && podLimit < 300 {
			// The old container (200m) still runs beside the 100m one.
			c.refused = append(c.refused, cs.ID.String())
			return "", errors.New("write cpu.cfs_quota_us: invalid argument")
		}
	}
	return "/kubepods/pod" + string(pod.UID), nil
}

// A CPU decrease of a container whose resizePolicy restarts it: the
// container is stopped before the pod cgroup shrinks (upstream's order:
// kill, resize, start), so the shrink the kernel would refuse while it
// runs succeeds, and the container comes back once at the new size.
func TestResizeRestartStopsBeforePodCgroupShrinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		cg := &strictPodCgroup{rt: rt}
		n, _, oldID := resizeRestartOnCPU(t, rt, cg)

		s := n.status.get(t, "u1")
		re := containerState(t, s, "restarts")
		if re.RestartCount != 1 || re.State.Running == nil || re.ContainerID == oldID {
			t.Errorf("restarts: restartCount %d, running %v, id %s (was %s); want restarted once and running", re.RestartCount, re.State.Running != nil, re.ContainerID, oldID)
		}
		if r := re.Resources; r == nil || r.Limits.Cpu().MilliValue() != 100 {
			t.Errorf("restarts: resources %v, want the cpu limit 100m", r)
		}
		cg.mu.Lock()
		refused, calls := cg.refused, cg.calls
		cg.mu.Unlock()
		if len(refused) > 0 {
			t.Errorf("the pod cgroup was shrunk while the container to restart still ran (%v)", refused)
		}
		if calls == 0 {
			t.Error("the pod cgroup was never resized")
		}
		for _, c := range s.Conditions {
			if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
				t.Errorf("condition %s left after the resize: %+v", c.Type, c)
			}
		}
		if in := containerState(t, s, "inplace"); in.RestartCount != 0 {
			t.Errorf("inplace restarted %d times, want 0", in.RestartCount)
		}
	})
}

// resizeRestartOnCPU starts a pod whose "restarts" container (200m,
// restarted for a CPU change) runs beside "inplace" (100m), with cg as the
// pod cgroup, then resizes "restarts" down to 100m. It returns the node,
// the resized pod and the ID of "restarts" before the resize.
func resizeRestartOnCPU(t *testing.T, rt *agenttest.FakeRuntime, cg allocation.PodCgroup) (*node, *v1.Pod, string) {
	t.Helper()
	rec := &resizeRecorder{calls: map[nodekit.ContainerID][]v1.ResourceRequirements{}}
	store := syncloop.NewPodStore() // built first: the resizer reads the loop's pods through it
	m, err := allocation.New(allocation.Config{
		Containers: rec, PodCgroup: cg, Pods: store.ActivePods,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, rt, rt, func(c *syncloop.Config) { c.Pods, c.Resizer = store, m })
	p := pod("u1", v1.RestartPolicyAlways, "inplace", "restarts")
	withResources(p, "inplace", "100m", "64Mi", false)
	withResources(p, "restarts", "200m", "64Mi", false)
	restartOnCPU := []v1.ContainerResizePolicy{{ResourceName: v1.ResourceCPU, RestartPolicy: v1.RestartContainer}}
	p.Spec.Containers[1].ResizePolicy = restartOnCPU
	n.send(nodekit.ADD, p)
	settle(3 * time.Second)
	oldID := containerState(t, n.status.get(t, "u1"), "restarts").ContainerID

	resized := p.DeepCopy()
	resized.Generation = 2
	withResources(resized, "restarts", "100m", "64Mi", false)
	resized.Spec.Containers[1].ResizePolicy = restartOnCPU
	n.send(nodekit.UPDATE, resized)
	settle(3 * time.Second)
	return n, resized, oldID
}

// lingeringPodCgroup refuses the first shrink of the pod's CPU below 300m
// even though the container to restart has stopped: on cgroup v1 the
// kernel releases a removed container cgroup asynchronously, and until it
// has, the stopped container's quota still bounds the pod's.
type lingeringPodCgroup struct {
	mu      sync.Mutex
	refused int
	podCPU  []int64
}

func (c *lingeringPodCgroup) EnsurePod(_ context.Context, pod *v1.Pod) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var podLimit int64
	for _, ctr := range pod.Spec.Containers {
		podLimit += ctr.Resources.Limits.Cpu().MilliValue()
	}
	if podLimit < 300 && c.refused == 0 {
		c.refused++
		return "", errors.New("write cpu.cfs_quota_us: invalid argument")
	}
	c.podCPU = append(c.podCPU, podLimit)
	return "/kubepods/pod" + string(pod.UID), nil
}

// A resize whose pod cgroup shrink fails once after the container to
// restart was stopped: the container starts again in the same sync at
// the new size (as upstream), the shrink is retried once it runs, and the
// container is restarted once, not a second time at the next sync.
func TestResizeRestartOnceWhenThePodCgroupShrinkFailsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		cg := &lingeringPodCgroup{}
		n, resized, oldID := resizeRestartOnCPU(t, rt, cg)
		n.send(nodekit.UPDATE, resized) // a later sync must not restart it again
		settle(3 * time.Second)

		s := n.status.get(t, "u1")
		re := containerState(t, s, "restarts")
		if re.RestartCount != 1 || re.State.Running == nil || re.ContainerID == oldID {
			t.Errorf("restarts: restartCount %d, running %v, id %s (was %s); want restarted once and running", re.RestartCount, re.State.Running != nil, re.ContainerID, oldID)
		}
		cg.mu.Lock()
		refused, podCPU := cg.refused, append([]int64(nil), cg.podCPU...)
		cg.mu.Unlock()
		if refused != 1 {
			t.Fatalf("the pod cgroup refused %d shrinks, want the one this test scripts", refused)
		}
		if len(podCPU) == 0 || podCPU[len(podCPU)-1] != 200 {
			t.Errorf("pod cgroup CPU limits written %v, want the last at 200m", podCPU)
		}
		for _, c := range s.Conditions {
			if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
				t.Errorf("condition %s left after the resize: %+v", c.Type, c)
			}
		}
	})
}
