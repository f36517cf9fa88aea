package statusmgr

import (
	"encoding/json"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// rvClientset is a fake clientset whose pod status patches behave as the
// API server's: a metadata.resourceVersion in the patch is a precondition
// (409 when the pod has another), and every write bumps the pod's
// resourceVersion. bump writes the pod as someone else would.
type rvClientset struct {
	*fake.Clientset
	rv int
}

func newRVClientset(t *testing.T, pod *v1.Pod) *rvClientset {
	t.Helper()
	c := &rvClientset{rv: 10}
	pod = pod.DeepCopy()
	pod.ResourceVersion = strconv.Itoa(c.rv)
	c.Clientset = fake.NewClientset(pod)
	c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		obj, err := c.Tracker().Get(podsGVR, pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*v1.Pod)
		var meta struct {
			Metadata struct {
				ResourceVersion string    `json:"resourceVersion"`
				UID             types.UID `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &meta); err != nil {
			return true, nil, err
		}
		if rv := meta.Metadata.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(podsResource, cur.Name, nil)
		}
		before, _ := json.Marshal(cur)
		after, err := strategicpatch.StrategicMergePatch(before, pa.GetPatch(), v1.Pod{})
		if err != nil {
			return true, nil, err
		}
		var next v1.Pod
		if err := json.Unmarshal(after, &next); err != nil {
			return true, nil, err
		}
		c.rv++
		next.ResourceVersion = strconv.Itoa(c.rv)
		if err := c.Tracker().Update(podsGVR, &next, next.Namespace); err != nil {
			return true, nil, err
		}
		return true, next.DeepCopy(), nil
	})
	return c
}

// bump changes the pod's labels as another client would: a new
// resourceVersion the sink has not seen.
func (c *rvClientset) bump(t *testing.T, pod *v1.Pod) {
	t.Helper()
	obj, err := c.Tracker().Get(podsGVR, pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*v1.Pod).DeepCopy()
	p.Labels = map[string]string{"changed": "yes"}
	c.rv++
	p.ResourceVersion = strconv.Itoa(c.rv)
	if err := c.Tracker().Update(podsGVR, p, p.Namespace); err != nil {
		t.Fatal(err)
	}
}

func (c *rvClientset) stored(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	obj, err := c.Tracker().Get(podsGVR, pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*v1.Pod)
}

func TestAPISinkPatchesKnownVersionWithoutRead(t *testing.T) {
	pod := apiPod("web")
	cs := newRVClientset(t, pod)
	informed := cs.stored(t, pod).DeepCopy() // the caller's copy, as its informer has it
	sink := NewAPISink(clientgo.Wrap(cs))

	notReady := runningStatus(running("c", false))
	if err := sink.SetPodStatus(t.Context(), informed, &notReady); err != nil {
		t.Fatal(err)
	}
	// A second write before the caller's copy has seen the first: against
	// the first write's response, no read either.
	ready := runningStatus(running("c", true))
	if err := sink.SetPodStatus(t.Context(), informed, &ready); err != nil {
		t.Fatal(err)
	}
	if n := countActions(cs.Clientset, "get", ""); n != 0 {
		t.Errorf("%d pod reads for two status writes, want 0", n)
	}
	if n := countActions(cs.Clientset, "patch", "status"); n != 2 {
		t.Errorf("%d status patches, want 2", n)
	}
	var patch map[string]map[string]any
	if err := json.Unmarshal(lastPatch(cs.Clientset), &patch); err != nil {
		t.Fatal(err)
	}
	if rv := patch["metadata"]["resourceVersion"]; rv != "11" {
		t.Errorf("second patch's resourceVersion precondition = %v, want 11 (the first write's)", rv)
	}
	got := cs.stored(t, pod)
	if len(got.Status.ContainerStatuses) != 1 || !got.Status.ContainerStatuses[0].Ready || condition(got.Status, "example.com/gate") == nil {
		t.Errorf("stored status = %+v, want the ready container and the API's own condition", got.Status)
	}

	// The same status again, with the caller's copy caught up: nothing sent.
	before := countActions(cs.Clientset, "patch", "status")
	if err := sink.SetPodStatus(t.Context(), got.DeepCopy(), &ready); err != nil {
		t.Fatal(err)
	}
	if n := countActions(cs.Clientset, "patch", "status"); n != before {
		t.Errorf("an unchanged status was patched")
	}
	if len(sink.written) != 0 {
		t.Errorf("the sink keeps %d written statuses after the caller caught up, want 0", len(sink.written))
	}
}

func TestAPISinkReadsAfterStalePrecondition(t *testing.T) {
	pod := apiPod("web")
	cs := newRVClientset(t, pod)
	informed := cs.stored(t, pod).DeepCopy()
	sink := NewAPISink(clientgo.Wrap(cs))
	cs.bump(t, pod) // someone else wrote the pod after the caller's copy

	st := runningStatus(running("c", true))
	if err := sink.SetPodStatus(t.Context(), informed, &st); err != nil {
		t.Fatal(err)
	}
	if g, p := countActions(cs.Clientset, "get", ""), countActions(cs.Clientset, "patch", "status"); g != 1 || p != 2 {
		t.Errorf("%d reads and %d patches, want 1 and 2 (refused on the stale version, then read and patched)", g, p)
	}
	got := cs.stored(t, pod)
	if got.Labels["changed"] != "yes" || got.Status.Phase != v1.PodRunning {
		t.Errorf("stored pod = %v %+v, want the other writer's label and our status", got.Labels, got.Status)
	}

	// A pod gone from the API server: the optimistic patch's 404 ends it.
	if err := cs.Tracker().Delete(podsGVR, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	st.Message = "again"
	if err := sink.SetPodStatus(t.Context(), got, &st); err != nil {
		t.Errorf("status of a deleted pod: %v, want nil", err)
	}
	if len(sink.written) != 0 {
		t.Errorf("the sink keeps a deleted pod's status")
	}
}

func TestAPISinkForgetsOrphans(t *testing.T) {
	pod := apiPod("web")
	cs := newRVClientset(t, pod)
	sink := NewAPISink(clientgo.Wrap(cs))
	m, err := NewManager(Config{Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	st := runningStatus(running("c", true))
	if err := sink.SetPodStatus(t.Context(), cs.stored(t, pod).DeepCopy(), &st); err != nil {
		t.Fatal(err)
	}
	if len(sink.written) != 1 {
		t.Fatalf("the sink keeps %d written statuses, want 1", len(sink.written))
	}
	m.RemoveOrphanedStatuses(map[types.UID]bool{"other": true})
	if len(sink.written) != 0 {
		t.Errorf("RemoveOrphanedStatuses left %d written statuses in the sink", len(sink.written))
	}
}

// A resync drops the sink's copy of a write once the pods Config.Pods
// gives have caught up with it, and not before.
func TestResyncDropsWrittenStatusesCaughtUpWith(t *testing.T) {
	pod := apiPod("web")
	cs := newRVClientset(t, pod)
	sink := NewAPISink(clientgo.Wrap(cs))
	informed := cs.stored(t, pod).DeepCopy()
	m, err := NewManager(Config{Sink: sink, Pods: PodGetterFunc(func(types.UID) (*v1.Pod, bool) { return informed, true })})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetPodStatus(informed, runningStatus(running("c", true))); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(sink.written) != 1 {
		t.Fatalf("after the write the sink keeps %d statuses, want 1", len(sink.written))
	}
	if err := m.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(sink.written) != 1 {
		t.Fatalf("a resync with the caller's copy behind the write dropped it")
	}
	informed = cs.stored(t, pod).DeepCopy() // the informer catches up
	if err := m.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(sink.written) != 0 {
		t.Errorf("after the caller caught up the sink keeps %d statuses, want 0", len(sink.written))
	}
	if n := countActions(cs.Clientset, "patch", "status"); n != 1 {
		t.Errorf("%d status patches, want 1", n)
	}
}

func TestNewerResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"12", "11", true}, {"11", "11", false}, {"9", "11", false}, {"1", "", true}, {"", "", false}, {"x", "11", false}, {"12", "x", false},
	} {
		if got := newerResourceVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("newerResourceVersion(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func lastPatch(cs *fake.Clientset) []byte {
	var out []byte
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = p.GetPatch()
		}
	}
	return out
}

// The sink keeps the status of its last write's response, not the response:
// a pointer into it would keep the pod's spec and metadata alive per pod.
func TestAPISinkKeepsOnlyTheWrittenStatus(t *testing.T) {
	s := NewAPISink(clientgo.Wrap(fake.NewClientset()))
	written := &v1.Pod{}
	written.UID, written.ResourceVersion = "u1", "7"
	written.Status.Phase = v1.PodRunning
	s.remember("u1", written)
	w, ok := s.written["u1"]
	if !ok || w.resourceVersion != "7" || w.status.Phase != v1.PodRunning {
		t.Fatalf("remembered %+v, %v; want version 7, Running", w, ok)
	}
	if w.status == &written.Status {
		t.Error("the sink keeps a pointer into the response, so the whole response stays in memory")
	}
}
