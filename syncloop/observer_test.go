package syncloop_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/syncloop"
)

// recordingObserver keeps the (old, updated) pairs it is told of.
type recordingObserver struct{ seen [][2]*v1.Pod }

func (r *recordingObserver) ObservePodUpdate(_ context.Context, old, updated *v1.Pod) {
	r.seen = append(r.seen, [2]*v1.Pod{old, updated})
}

func TestUpdateObserversSeeOldAndNewPod(t *testing.T) {
	obs := &recordingObserver{}
	s := newStepped(t, func(c *syncloop.Config) { c.UpdateObservers = []syncloop.UpdateObserver{obs} })
	pod := webPod()
	s.add(t, pod)
	s.drain(t)
	if len(obs.seen) != 0 {
		t.Fatalf("an ADD reached the observers: %d calls", len(obs.seen))
	}

	updated := pod.DeepCopy()
	updated.Generation = 2
	updated.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m")}
	s.updates <- nodekit.PodUpdate{Op: nodekit.UPDATE, Source: nodekit.SourceAPI, Pods: []*v1.Pod{updated}}
	s.drain(t)
	if len(obs.seen) != 1 {
		t.Fatalf("observer calls after one UPDATE = %d, want 1", len(obs.seen))
	}
	if got := obs.seen[0]; got[0] != pod || got[1] != updated {
		t.Fatalf("observer got (generation %d, generation %d), want the held pod then the update", got[0].Generation, got[1].Generation)
	}

	// A pod the loop never held (no old pod) and a DELETE are not updates
	// of a running pod.
	stranger := webPod()
	stranger.UID, stranger.Name = "uid-other", "other"
	s.updates <- nodekit.PodUpdate{Op: nodekit.UPDATE, Source: nodekit.SourceAPI, Pods: []*v1.Pod{stranger}}
	deleting := updated.DeepCopy()
	deleting.DeletionGracePeriodSeconds = new(int64)
	s.updates <- nodekit.PodUpdate{Op: nodekit.DELETE, Source: nodekit.SourceAPI, Pods: []*v1.Pod{deleting}}
	s.drain(t)
	if len(obs.seen) != 1 {
		t.Fatalf("observer calls after an unknown pod's UPDATE and a DELETE = %d, want still 1", len(obs.seen))
	}
}
