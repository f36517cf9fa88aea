package gc_test

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/gc"
)

type noneGone struct{}

func (noneGone) ShouldPodContentBeRemoved(types.UID) bool { return false }
func (noneGone) ShouldPodRuntimeBeRemoved(types.UID) bool { return false }

func Example() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	dead := func(id string, age time.Duration) *nodekit.Container {
		return &nodekit.Container{ID: nodekit.ContainerID{Type: "containerd", ID: id}, Name: "app",
			State: nodekit.StateExited, CreatedAt: now.Add(-age)}
	}
	pods := []*nodekit.Pod{{ID: "uid-1", Containers: []*nodekit.Container{
		dead("restart-3", time.Minute), dead("restart-2", time.Hour), dead("restart-1", 2*time.Hour),
	}}}
	plan := gc.PlanContainerGC(now, gc.ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1}, pods, noneGone{}, true, false)
	for _, id := range plan.Containers {
		fmt.Println("remove container", id.ID)
	}

	images := []gc.ImageRecord{
		{ID: "sha256:a", Size: 300, FirstDetected: now.Add(-48 * time.Hour), LastUsed: now.Add(-24 * time.Hour)},
		{ID: "sha256:b", Size: 300, FirstDetected: now.Add(-48 * time.Hour), LastUsed: now.Add(-time.Hour)},
		{ID: "sha256:pause", Size: 1, Pinned: true},
	}
	ip, _ := gc.PlanImageGC(gc.ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute},
		now, now.Add(-time.Hour), images, 1000, 100)
	fmt.Println("remove images", ip.BySpace, "to free", ip.BytesToFree)
	// Output:
	// remove container restart-1
	// remove container restart-2
	// remove images [sha256:a] to free 100
}
