package statusmgr

import (
	"maps"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Deletion and static/mirror pod publication of the status manager.

func TestDeletePodExactlyOnce(t *testing.T) {
	m, sink, fc := newTestManager(t, Config{})
	pod := testPod("web", "c")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	mustSet(t, m, pod, runningStatus(running("c", true)))
	mustSync(t, m)

	deleting := pod.DeepCopy()
	now := metav1.NewTime(fc.Now())
	deleting.DeletionTimestamp = &now
	mustSet(t, m, deleting, runningStatus(running("c", true)))
	if err := m.TerminatePod(deleting); err != nil {
		t.Fatal(err)
	}
	mustSync(t, m)
	if d := sink.deleted(); len(d) != 0 {
		t.Fatalf("DeletePod before resources were reclaimed: %v", d)
	}

	if err := m.PodResourcesReclaimed(pod.UID); err != nil {
		t.Fatal(err)
	}
	sink.failDelete = 1
	if err := m.SyncOnce(t.Context()); err == nil {
		t.Fatal("a failed DeletePod was not reported")
	}
	mustSync(t, m)
	mustSync(t, m)
	if err := m.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := sink.deleted(); len(d) != 1 || d[0] != pod.UID {
		t.Fatalf("DeletePod calls after a failure and retries = %v, want exactly one for %s", d, pod.UID)
	}
	// The terminal status went out before the delete, and nothing after.
	sets := sink.takeSets()
	if last := sets[len(sets)-1]; last.status.Phase != v1.PodFailed {
		t.Errorf("last status published before the delete has phase %s, want Failed", last.status.Phase)
	}
	mustSet(t, m, deleting, v1.PodStatus{Phase: v1.PodFailed})
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 0 {
		t.Errorf("statuses published after the pod was deleted: %+v", got)
	}
}

func TestDeletePodWaitsForDeletionAndTerminalPublication(t *testing.T) {
	m, sink, _ := newTestManager(t, Config{})
	pod := testPod("job", "c")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	mustSet(t, m, pod, v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}})
	if err := m.PodResourcesReclaimed(pod.UID); err != nil {
		t.Fatal(err)
	}
	mustSync(t, m)
	if d := sink.deleted(); len(d) != 0 {
		t.Fatalf("a finished pod nobody deleted was deleted: %v", d)
	}

	// The user deletes it later; the manager learns it from the pod getter.
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: t0}
	m.pods = PodGetterFunc(func(types.UID) (*v1.Pod, bool) { return deleted, true })
	sink.failSet = 1
	mustSet(t, m, pod, v1.PodStatus{Phase: v1.PodSucceeded, Message: "new", ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}})
	if err := m.SyncOnce(t.Context()); err == nil {
		t.Fatal("failing publication not reported")
	}
	if d := sink.deleted(); len(d) != 0 {
		t.Fatalf("deleted before the newest terminal status was published: %v", d)
	}
	mustSync(t, m)
	if d := sink.deleted(); len(d) != 1 {
		t.Fatalf("DeletePod calls = %v, want one", d)
	}
}

func TestStaticPodsWithoutMirrorsPublishThemselves(t *testing.T) {
	m, sink, _ := newTestManager(t, Config{})
	static := testPod("edge-app", "c")
	static.Annotations[annotationConfigSource] = "file"
	mustSet(t, m, static, runningStatus(running("c", true)))
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 1 || got[0].uid != static.UID {
		t.Fatalf("published %+v, want the static pod's own status", got)
	}
}

func TestStaticPodsPublishToTheirMirror(t *testing.T) {
	mirrors := map[string]*v1.Pod{}
	m, sink, _ := newTestManager(t, Config{Mirrors: MirrorPodGetterFunc(func(full string) (*v1.Pod, bool) {
		p, ok := mirrors[full]
		return p, ok
	})})
	static := testPod("etcd-node1", "c")
	static.Annotations[annotationConfigSource] = "file"
	static.Annotations[annotationConfigHash] = "hash"
	mustSet(t, m, static, runningStatus(running("c", true)))
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 0 {
		t.Fatalf("published %+v while the static pod has no mirror pod", got)
	}

	// A mirror of an earlier version of the manifest gets nothing.
	stale := testPod("etcd-node1", "c")
	stale.UID = "mirror-0"
	stale.Annotations[v1.MirrorPodAnnotationKey] = "older-hash"
	mirrors["etcd-node1_ns"] = stale
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 0 {
		t.Fatalf("published %+v to a mirror of another version", got)
	}

	mirror := testPod("etcd-node1", "c")
	mirror.UID = "mirror-1"
	mirror.Annotations[v1.MirrorPodAnnotationKey] = "hash"
	mirrors["etcd-node1_ns"] = mirror
	mustSync(t, m)
	got := sink.takeSets()
	if len(got) != 1 || got[0].uid != "mirror-1" {
		t.Fatalf("published %+v, want the status sent to mirror-1", got)
	}

	// A recreated mirror pod gets the status again.
	mirror2 := mirror.DeepCopy()
	mirror2.UID = "mirror-2"
	mirrors["etcd-node1_ns"] = mirror2
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 1 || got[0].uid != "mirror-2" {
		t.Fatalf("published %+v, want the status sent to the new mirror-2", got)
	}
	if _, ok := m.GetPodStatus(static.UID); !ok {
		t.Errorf("static pod status not found under the static pod's UID")
	}

	// Static pods are never deleted through the sink.
	deleting := static.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	if err := m.TerminatePod(deleting); err != nil {
		t.Fatal(err)
	}
	mustSet(t, m, deleting, v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}})
	if err := m.PodResourcesReclaimed(static.UID); err != nil {
		t.Fatal(err)
	}
	mustSync(t, m)
	if d := sink.deleted(); len(d) != 0 {
		t.Errorf("static pod deleted through the sink: %v", d)
	}
}

func TestStaticPodIgnoresAStaleMirror(t *testing.T) {
	stale := testPod("etcd-node1", "c")
	stale.UID = "mirror-old"
	stale.Spec.RestartPolicy = v1.RestartPolicyNever
	stale.Annotations[v1.MirrorPodAnnotationKey] = "old-hash"
	stale.Status = v1.PodStatus{Phase: v1.PodFailed, ContainerStatuses: []v1.ContainerStatus{exited("c", 1)}}
	m, _, _ := newTestManager(t, Config{Mirrors: MirrorPodGetterFunc(func(string) (*v1.Pod, bool) { return stale, true })})

	static := testPod("etcd-node1", "c")
	static.Spec.RestartPolicy = v1.RestartPolicyNever
	static.Annotations[annotationConfigSource] = "file"
	static.Annotations[annotationConfigHash] = "new-hash"
	if err := m.SetPodStatus(static, runningStatus(running("c", true))); err != nil {
		t.Fatalf("new static pod under a stale mirror: %v", err)
	}
	if got, _ := m.GetPodStatus(static.UID); got.Phase != v1.PodRunning {
		t.Errorf("phase = %s, want Running (the stale mirror's Failed does not apply)", got.Phase)
	}
}

// SyncOnce looks only at the pods that changed since they were last
// published (a new version, a reclaim), so a sync costs O(changed pods);
// Resync looks at every pod. A finished, reclaimed pod stays looked at while
// its deletion can show first in Config.Pods.
func TestSyncOnceLooksAtChangedPodsOnly(t *testing.T) {
	var mu sync.Mutex
	lookups := map[types.UID]int{}
	apiPods := map[types.UID]*v1.Pod{}
	getter := PodGetterFunc(func(uid types.UID) (*v1.Pod, bool) {
		mu.Lock()
		defer mu.Unlock()
		lookups[uid]++
		p, ok := apiPods[uid]
		return p, ok
	})
	took := func() map[types.UID]int {
		mu.Lock()
		defer mu.Unlock()
		out := lookups
		lookups = map[types.UID]int{}
		return out
	}
	m, sink, _ := newTestManager(t, Config{Pods: getter})
	var pods []*v1.Pod
	for _, name := range []string{"a", "b", "c"} {
		p := testPod(name, "c")
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		pods = append(pods, p)
		mu.Lock()
		apiPods[p.UID] = p
		mu.Unlock()
		mustSet(t, m, p, runningStatus(running("c", false)))
	}
	mustSync(t, m)
	if got := len(sink.takeSets()); got != 3 {
		t.Fatalf("first sync published %d statuses, want 3", got)
	}
	took()

	mustSet(t, m, pods[1], runningStatus(running("c", true)))
	mustSync(t, m)
	if got, want := took(), map[types.UID]int{pods[1].UID: 1}; !maps.Equal(got, want) {
		t.Errorf("SyncOnce after one change looked up %v, want %v", got, want)
	}
	if got := sink.takeSets(); len(got) != 1 || got[0].uid != pods[1].UID {
		t.Errorf("SyncOnce after one change published %v, want b's status", got)
	}
	mustSync(t, m)
	if got := took(); len(got) != 0 {
		t.Errorf("SyncOnce with nothing changed looked up %v", got)
	}
	if err := m.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := took(); len(got) != 3 {
		t.Errorf("Resync looked up %v, want all 3 pods", got)
	}

	// c finishes and is reclaimed; it is deleted in the API later, which
	// only the getter shows.
	mustSet(t, m, pods[2], v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}})
	if err := m.PodResourcesReclaimed(pods[2].UID); err != nil {
		t.Fatal(err)
	}
	mustSync(t, m)
	mustSync(t, m)
	if d := sink.deleted(); len(d) != 0 {
		t.Fatalf("deleted before its deletion: %v", d)
	}
	deleted := pods[2].DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: t0}
	mu.Lock()
	apiPods[deleted.UID] = deleted
	mu.Unlock()
	mustSync(t, m)
	if d := sink.deleted(); len(d) != 1 || d[0] != deleted.UID {
		t.Fatalf("DeletePod calls %v after the deletion showed in the getter, want c's", d)
	}
	took()
	mustSync(t, m)
	if got := took(); len(got) != 0 {
		t.Errorf("SyncOnce after the delete looked up %v", got)
	}
}
