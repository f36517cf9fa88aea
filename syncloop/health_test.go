package syncloop_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/syncloop"
)

// fakeHealth answers one resource per container with the health set.
type fakeHealth struct {
	mu     sync.Mutex
	name   v1.ResourceName
	health v1.ResourceHealthStatus
}

func (f *fakeHealth) AllocatedResourcesStatus(_ *v1.Pod, container string) []v1.ResourceStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if container != "app" {
		return nil
	}
	return []v1.ResourceStatus{{Name: f.name, Resources: []v1.ResourceHealth{{ResourceID: "dev-0", Health: f.health}}}}
}

func (f *fakeHealth) set(h v1.ResourceHealthStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health = h
}

// TestAllocatedResourcesStatus: the regular containers' statuses carry
// every provider's entries, in order (init containers none, as
// upstream); a notice on ProbeUpdates publishes a health change at once,
// not at the next periodic sync.
func TestAllocatedResourcesStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := &fakeHealth{name: "example.com/foo", health: v1.ResourceHealthStatusHealthy}
		claim := &fakeHealth{name: "claim:gpu", health: v1.ResourceHealthStatusHealthy}
		wake := make(chan types.UID, 1)
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Loop: func(c *syncloop.Config) {
			c.ResourceHealth = []syncloop.ResourceHealth{dev, claim}
			c.ProbeUpdates = wake
			c.SyncPeriod = time.Hour
		}})
		p := pod("u1", v1.RestartPolicyAlways, "app", "other")
		p.Spec.InitContainers = []v1.Container{{Name: "app-init", Image: "busybox"}}
		n.AddPod(p)
		n.Settle(3 * time.Second)
		st := simStatus(t, n, "u1")
		if len(st.ContainerStatuses) != 2 {
			t.Fatalf("container statuses %+v, want 2", st.ContainerStatuses)
		}
		got := st.ContainerStatuses[0].AllocatedResourcesStatus
		if len(got) != 2 || got[0].Name != "example.com/foo" || got[1].Name != "claim:gpu" || got[1].Resources[0].Health != v1.ResourceHealthStatusHealthy {
			t.Fatalf("app's allocatedResourcesStatus = %+v, want example.com/foo then claim:gpu, Healthy", got)
		}
		if o := st.ContainerStatuses[1].AllocatedResourcesStatus; o != nil {
			t.Errorf("other's allocatedResourcesStatus = %+v, want none", o)
		}
		for _, c := range st.InitContainerStatuses {
			if c.AllocatedResourcesStatus != nil {
				t.Errorf("init container %s: %+v, want none", c.Name, c.AllocatedResourcesStatus)
			}
		}

		claim.set(v1.ResourceHealthStatusUnhealthy)
		wake <- "u1"
		n.Settle(2 * time.Second)
		got = simStatus(t, n, "u1").ContainerStatuses[0].AllocatedResourcesStatus
		if len(got) != 2 || got[1].Resources[0].Health != v1.ResourceHealthStatusUnhealthy {
			t.Errorf("after the notice: %+v, want claim:gpu Unhealthy", got)
		}
	})
}
