package statusmgr

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestNodeReportedAfterEachSync: Reported sees the Node after every sync
// that succeeded, with the volumesInUse a setter wrote, whether the status
// was patched or unchanged, and the annotations are set at registration.
func TestNodeReportedAfterEachSync(t *testing.T) {
	var mu sync.Mutex
	inUse := []v1.UniqueVolumeName{}
	var seen [][]v1.UniqueVolumeName
	setter := StatusSetterFunc(func(_ context.Context, n *v1.Node) error {
		mu.Lock()
		defer mu.Unlock()
		n.Status.VolumesInUse = slices.Clone(inUse)
		return nil
	})
	f := newNodeFixture(t, NodeConfig{Setters: []StatusSetter{setter},
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		Reported: func(n *v1.Node) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, slices.Clone(n.Status.VolumesInUse))
		}})
	ctx := t.Context()
	sync := func() {
		t.Helper()
		f.clock.Step(10 * time.Second)
		if err := f.r.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync() // registers (reported), then reads it unchanged (reported)
	if got := f.node(t).Annotations["volumes.kubernetes.io/controller-managed-attach-detach"]; got != "true" {
		t.Fatalf("annotation %q", got)
	}
	mu.Lock()
	inUse = []v1.UniqueVolumeName{"kubernetes.io/csi/d^a"}
	mu.Unlock()
	sync()
	if got := f.node(t).Status.VolumesInUse; !slices.Equal(got, []v1.UniqueVolumeName{"kubernetes.io/csi/d^a"}) {
		t.Fatalf("volumesInUse on the Node = %v", got)
	}
	sync()
	mu.Lock()
	inUse = nil
	mu.Unlock()
	sync()
	if got := f.node(t).Status.VolumesInUse; len(got) != 0 {
		t.Fatalf("volumesInUse after the volume went = %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 || len(seen[1]) != 0 || len(seen[2]) != 1 || len(seen[3]) != 1 || len(seen[4]) != 0 {
		t.Fatalf("reported %v, want [] [] [a] [a] []", seen)
	}
}
