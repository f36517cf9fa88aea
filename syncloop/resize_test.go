package syncloop_test

import (
	"context"
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
		var n *node
		m, err := allocation.New(allocation.Config{
			Containers: rec, Pods: func() []*v1.Pod { return n.loop.ActivePods() },
		})
		if err != nil {
			t.Fatal(err)
		}
		n = startNodeWith(t, rt, rt, func(c *syncloop.Config) { c.Resizer = m })
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
