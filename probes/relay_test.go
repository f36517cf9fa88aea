package probes_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/probes"
)

type resultKey struct {
	kind probes.Kind
	id   string
}

// fakeResults is a ResultSource with set results.
type fakeResults struct {
	results map[resultKey]probes.Result
	updates chan types.UID
}

func (f *fakeResults) Result(kind probes.Kind, id nodekit.ContainerID) (probes.Result, bool) {
	r, ok := f.results[resultKey{kind, id.ID}]
	return r, ok
}

func (f *fakeResults) Updates() <-chan types.UID { return f.updates }

// fakeWriter records the readiness and startup set per container ID.
type fakeWriter struct {
	mu      sync.Mutex
	status  v1.PodStatus
	ready   map[string]bool
	started map[string]bool
}

func (f *fakeWriter) GetPodStatus(types.UID) (v1.PodStatus, bool) { return f.status, true }

func (f *fakeWriter) SetContainerReadiness(_ types.UID, id nodekit.ContainerID, ready bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready[id.ID] = ready
	return nil
}

func (f *fakeWriter) SetContainerStartup(_ types.UID, id nodekit.ContainerID, started bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started[id.ID] = started
	return nil
}

type podMap map[types.UID]*v1.Pod

func (m podMap) GetPodByUID(uid types.UID) (*v1.Pod, bool) { p, ok := m[uid]; return p, ok }

var (
	_ probes.ResultSource = (*probes.Manager)(nil)
	_ probes.ResultSource = (*fakeResults)(nil)
	_ probes.StatusWriter = (*fakeWriter)(nil)
	_ probes.PodGetter    = podMap(nil)
)

// TestRelay: readiness waits for startup, a readiness result not in yet
// leaves the container as it is, startup is written as it stands, the
// pod's UID goes on to the loop after its results are written, and the
// other wake-ups are relayed too.
func TestRelay(t *testing.T) {
	probe := &v1.Probe{}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "both", StartupProbe: probe, ReadinessProbe: probe},  // started, readiness Success: ready
		{Name: "early", StartupProbe: probe, ReadinessProbe: probe}, // not started: not ready whatever readiness says
		{Name: "pending", ReadinessProbe: probe},                    // no readiness result yet: untouched
		{Name: "plain"},                                             // no probe: untouched
	}}}
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	w := &fakeWriter{ready: map[string]bool{}, started: map[string]bool{}, status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
		{Name: "both", ContainerID: "fake://1", State: running},
		{Name: "early", ContainerID: "fake://2", State: running},
		{Name: "pending", ContainerID: "fake://3", State: running},
		{Name: "plain", ContainerID: "fake://4", State: running},
	}}}
	src := &fakeResults{updates: make(chan types.UID), results: map[resultKey]probes.Result{
		{probes.Startup, "1"}: probes.Success, {probes.Readiness, "1"}: probes.Success,
		{probes.Startup, "2"}: probes.Failure, {probes.Readiness, "2"}: probes.Success,
	}}
	synctest.Test(t, func(t *testing.T) {
		resizes := make(chan types.UID, 1)
		r := probes.NewRelay(src, w, podMap{"u1": pod}, resizes, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		src.updates <- "u1"
		if got := <-r.Updates(); got != "u1" {
			t.Errorf("relayed %q, want u1", got)
		}
		if want := map[string]bool{"1": true, "2": false}; !maps.Equal(w.ready, want) {
			t.Errorf("readiness written %v, want %v", w.ready, want)
		}
		if want := map[string]bool{"1": true, "2": false}; !maps.Equal(w.started, want) {
			t.Errorf("startup written %v, want %v", w.started, want)
		}
		resizes <- "u2"
		if got := <-r.Updates(); got != "u2" {
			t.Errorf("relayed %q, want u2 (another wake-up)", got)
		}
		cancel()
		if err := <-done; err == nil {
			t.Error("Run returned nil after its context ended")
		}
		if ids := slices.Sorted(maps.Keys(w.ready)); len(ids) != 2 {
			t.Errorf("readiness written for %v", ids)
		}
	})
}
