package criruntime

import (
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// recordingMetrics keeps what the runtime reported.
type recordingMetrics struct {
	mu         sync.Mutex
	ops, errs  map[string]int
	pulls      []types.UID
	pullSizes  []uint64
	pods       int
	podErrs    int
	containers map[string]int // "type/failure"
}

func newRecordingMetrics() *recordingMetrics {
	return &recordingMetrics{ops: map[string]int{}, errs: map[string]int{}, containers: map[string]int{}}
}

func (m *recordingMetrics) ObserveRuntimeOperation(op string, _ time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops[op]++
	if err != nil {
		m.errs[op]++
	}
}

func (m *recordingMetrics) ObserveImagePull(pod types.UID, size uint64, asked, finished time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if finished.Before(asked) {
		panic("pull finished before it was asked for")
	}
	m.pulls, m.pullSizes = append(m.pulls, pod), append(m.pullSizes, size)
}

func (m *recordingMetrics) StartedPod(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pods++
	if err != nil {
		m.podErrs++
	}
}

func (m *recordingMetrics) StartedContainer(typ, failure string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.containers[typ+"/"+failure]++
}

var _ Metrics = (*recordingMetrics)(nil)

func TestMetricsCountCRICallsAndStarts(t *testing.T) {
	m := newRecordingMetrics()
	r, rs, is := newFakeWith(t, Config{Metrics: m})
	if m.ops["version"] != 1 {
		t.Fatalf("version calls = %d, want 1 (NewFromServices asks once)", m.ops["version"])
	}
	is.SetFakeImageSize(20 << 20)
	pod := testPod(v1.Container{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullAlways})
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox:1.36", ImagePullPolicy: v1.PullAlways}}
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, InitContainersToStart: []int{0}}})
	if err := res.Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	st, err := r.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	res = r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Status: st, Actions: nodekit.PodActions{SandboxID: res.SandboxID, ContainersToStart: []int{0}}})
	if err := res.Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	for _, op := range []string{"run_podsandbox", "podsandbox_status", "create_container", "start_container", "pull_image", "image_status"} {
		if m.ops[op] == 0 {
			t.Errorf("no %s operation counted: %v", op, m.ops)
		}
	}
	if m.pods != 1 || m.podErrs != 0 {
		t.Errorf("started pods = %d (errors %d), want 1 (0)", m.pods, m.podErrs)
	}
	if m.containers["init_container/"] != 1 || m.containers["container/"] != 1 {
		t.Errorf("started containers = %v, want one init_container and one container", m.containers)
	}
	if len(m.pulls) != 2 || m.pulls[0] != pod.UID || m.pullSizes[0] != 20<<20 {
		t.Errorf("image pulls = %v sizes %v, want two for %s of 20MiB", m.pulls, m.pullSizes, pod.UID)
	}

	// A failed create counts as an operation error and a failed start
	// with its reason.
	rs.InjectError("CreateContainer", errors.New("boom"))
	st, _ = r.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
	res = r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Status: st, Actions: nodekit.PodActions{SandboxID: res.SandboxID, ContainersToStart: []int{0}}})
	if res.Err() == nil {
		t.Fatal("SyncPod with a failing CreateContainer succeeded")
	}
	if m.errs["create_container"] != 1 {
		t.Errorf("create_container errors = %d, want 1", m.errs["create_container"])
	}
	if got := m.containers["container/"+string(nodekit.ErrCreateContainer)]; got != 1 {
		t.Errorf("failed starts = %v, want one container/%s", m.containers, nodekit.ErrCreateContainer)
	}
}
