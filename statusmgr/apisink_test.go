package statusmgr

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

var podsResource = schema.GroupResource{Resource: "pods"}

func apiPod(name string) *v1.Pod {
	p := testPod(name, "c")
	p.Spec.NodeName = "node1"
	p.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue},
		{Type: "example.com/gate", Status: v1.ConditionTrue, Reason: "SetByController"},
	}}
	return p
}

func countActions(cs *fake.Clientset, verb, subresource string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

func TestAPISinkPatchesStatus(t *testing.T) {
	pod := apiPod("web")
	cs := fake.NewClientset(pod)
	sink := NewAPISink(clientgo.Wrap(cs))

	st := runningStatus(running("c", true))
	st.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	if err := sink.SetPodStatus(t.Context(), pod, &st); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Pods("ns").Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodRunning || len(got.Status.ContainerStatuses) != 1 {
		t.Errorf("status = %+v, want Running with one container", got.Status)
	}
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.PodScheduled, "example.com/gate"} {
		if c := condition(got.Status, typ); c == nil || c.Status != v1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True (ours, or kept from the API server)", typ, c)
		}
	}
	var patch map[string]any
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			if p.GetSubresource() != "status" {
				t.Errorf("patched subresource %q, want status", p.GetSubresource())
			}
			if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
				t.Fatal(err)
			}
		}
	}
	if uid := patch["metadata"].(map[string]any)["uid"]; uid != string(pod.UID) {
		t.Errorf("patch metadata.uid = %v, want %s as precondition", uid, pod.UID)
	}

	// The same status again sends no patch.
	before := countActions(cs, "patch", "status")
	if err := sink.SetPodStatus(t.Context(), got, &st); err != nil {
		t.Fatal(err)
	}
	if after := countActions(cs, "patch", "status"); after != before {
		t.Errorf("an unchanged status was patched (%d patches, was %d)", after, before)
	}
}

func TestAPISinkLeavesOtherPodsAlone(t *testing.T) {
	pod := apiPod("web")
	cs := fake.NewClientset(pod)
	sink := NewAPISink(clientgo.Wrap(cs))
	st := runningStatus(running("c", true))

	recreated := pod.DeepCopy()
	recreated.UID = "older-uid"
	if err := sink.SetPodStatus(t.Context(), recreated, &st); err != nil {
		t.Errorf("status of a pod since recreated: %v, want nil", err)
	}
	gone := apiPod("gone")
	if err := sink.SetPodStatus(t.Context(), gone, &st); err != nil {
		t.Errorf("status of a missing pod: %v, want nil", err)
	}
	if n := countActions(cs, "patch", "status"); n != 0 {
		t.Errorf("%d patches sent for pods that are not ours", n)
	}
}

func TestAPISinkPatchesWhenReadIsForbidden(t *testing.T) {
	// With node credentials the Node authorizer forbids reading a pod it
	// does not link to the node yet (or any more).
	pod := apiPod("web")
	cs := fake.NewClientset(pod)
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(podsResource, "web", errors.New("no relationship found"))
	})
	st := runningStatus(running("c", true))
	if err := NewAPISink(clientgo.Wrap(cs)).SetPodStatus(t.Context(), pod, &st); err != nil {
		t.Fatalf("SetPodStatus with a forbidden read: %v, want a patch against the known status", err)
	}
	stored, err := cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "ns", "web")
	if err != nil {
		t.Fatal(err)
	}
	got := stored.(*v1.Pod)
	if got.Status.Phase != v1.PodRunning || condition(got.Status, "example.com/gate") == nil {
		t.Errorf("status = %+v, want Running with the known conditions kept", got.Status)
	}
	gone := apiPod("gone")
	if err := NewAPISink(clientgo.Wrap(cs)).SetPodStatus(t.Context(), gone, &st); err != nil {
		t.Errorf("a forbidden read of a deleted pod: %v, want nil (the patch says 404)", err)
	}
}

func TestAPISinkTreatsUIDMismatchAsDone(t *testing.T) {
	// With a forbidden read the sink patches blind; for a pod recreated
	// under the same name the API server refuses the UID (422 on
	// metadata.uid). That is an answer, not an error to retry.
	pod := apiPod("web")
	cs := fake.NewClientset(pod)
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(podsResource, "web", errors.New("no relationship found"))
	})
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "web", field.ErrorList{
			field.Invalid(field.NewPath("metadata", "uid"), "old", "field is immutable")})
	})
	st := runningStatus(running("c", true))
	if err := NewAPISink(clientgo.Wrap(cs)).SetPodStatus(t.Context(), pod, &st); err != nil {
		t.Errorf("status of a recreated pod: %v, want nil", err)
	}
	if n := countActions(cs, "patch", "status"); n != 1 {
		t.Errorf("%d patches, want 1 (no retry after a UID mismatch)", n)
	}
	if uidMismatch(apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "web", field.ErrorList{
		field.Invalid(field.NewPath("status", "phase"), "x", "bad")})) {
		t.Errorf("an invalid phase was taken for a UID mismatch")
	}
}

func TestAPISinkRetriesConflictOnce(t *testing.T) {
	pod := apiPod("web")
	cs := fake.NewClientset(pod)
	failures := 1
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewConflict(podsResource, "web", nil)
		}
		return false, nil, nil
	})
	st := runningStatus(running("c", true))
	if err := NewAPISink(clientgo.Wrap(cs)).SetPodStatus(t.Context(), pod, &st); err != nil {
		t.Fatalf("one conflict: %v, want a successful retry", err)
	}
	if n := countActions(cs, "get", ""); n != 2 {
		t.Errorf("%d reads, want 2 (the retry reads the pod again)", n)
	}

	failures = 2
	st.Message = "changed"
	if err := NewAPISink(clientgo.Wrap(cs)).SetPodStatus(t.Context(), pod, &st); !apierrors.IsConflict(err) {
		t.Errorf("two conflicts: %v, want the conflict returned", err)
	}
}

func TestAPISinkHoldsTerminalPhaseWhileRunning(t *testing.T) {
	api := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: "example.com/x", Status: v1.ConditionTrue}}}
	ours := v1.PodStatus{Phase: v1.PodFailed, Reason: "DeadlineExceeded", ContainerStatuses: []v1.ContainerStatus{running("c", true)},
		Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}}
	got := mergeForAPI(&api, &ours)
	if got.Phase != v1.PodRunning || got.Reason != "" {
		t.Errorf("phase = %s (%s), want Running kept while a container runs", got.Phase, got.Reason)
	}
	if condition(*got, v1.DisruptionTarget) != nil {
		t.Errorf("DisruptionTarget sent before the pod is terminal")
	}
	ours.ContainerStatuses = []v1.ContainerStatus{exited("c", 137)}
	got = mergeForAPI(&api, &ours)
	if got.Phase != v1.PodFailed || condition(*got, v1.DisruptionTarget) == nil || condition(*got, "example.com/x") == nil {
		t.Errorf("merged = %+v, want Failed with DisruptionTarget and the API's own condition", got)
	}
}

func TestAPISinkDeletePod(t *testing.T) {
	pod := apiPod("web")
	cs := fake.NewClientset(pod)
	if err := NewAPISink(clientgo.Wrap(cs)).DeletePod(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	var opts metav1.DeleteOptions
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			opts = d.GetDeleteOptions()
		}
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != pod.UID {
		t.Errorf("delete options = %+v, want grace 0 and UID precondition %s", opts, pod.UID)
	}
	if _, err := cs.CoreV1().Pods("ns").Get(t.Context(), "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there: %v", err)
	}
	if err := NewAPISink(clientgo.Wrap(cs)).DeletePod(t.Context(), pod); err != nil {
		t.Errorf("deleting a missing pod: %v, want nil", err)
	}
}

func TestAPISinkDeleteConflict(t *testing.T) {
	tests := []struct {
		name      string
		storedUID string
		conflicts int
		wantErr   bool
		wantGone  bool
	}{
		{name: "recreated pod is kept", storedUID: "other", conflicts: 1, wantGone: false},
		{name: "same pod retried", storedUID: "web-uid", conflicts: 1, wantGone: true},
		{name: "persistent conflict", storedUID: "web-uid", conflicts: 5, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stored := apiPod("web")
			stored.UID = typesUID(tc.storedUID)
			cs := fake.NewClientset(stored)
			conflicts := tc.conflicts
			cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				// The fake does not check preconditions: model the API server.
				opts := a.(k8stesting.DeleteAction).GetDeleteOptions()
				if conflicts > 0 || (opts.Preconditions != nil && *opts.Preconditions.UID != stored.UID) {
					conflicts--
					return true, nil, apierrors.NewConflict(podsResource, "web", nil)
				}
				return false, nil, nil
			})
			err := NewAPISink(clientgo.Wrap(cs)).DeletePod(t.Context(), apiPod("web"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("DeletePod = %v, want error: %v", err, tc.wantErr)
			}
			_, gerr := cs.CoreV1().Pods("ns").Get(t.Context(), "web", metav1.GetOptions{})
			if gone := apierrors.IsNotFound(gerr); gone != tc.wantGone {
				t.Errorf("pod gone = %v, want %v", gone, tc.wantGone)
			}
		})
	}
}

func TestPodStatusPatchIsMinimal(t *testing.T) {
	old := runningStatus(running("c", false))
	next := runningStatus(running("c", true))
	patch, unchanged, err := podStatusPatch("u1", "", &old, &next)
	if err != nil || unchanged {
		t.Fatalf("podStatusPatch = %s, %v, %v", patch, unchanged, err)
	}
	if !strings.Contains(string(patch), `"uid":"u1"`) || !strings.Contains(string(patch), `"ready":true`) {
		t.Errorf("patch %s lacks the uid or the change", patch)
	}
	if _, unchanged, _ := podStatusPatch("u1", "", &next, &next); !unchanged {
		t.Errorf("a patch between equal statuses is not reported unchanged")
	}
}

// The patch from the status documents is the patch from whole Pods (the
// form upstream computes it from), byte for byte.
func TestPodStatusPatchAsFromPods(t *testing.T) {
	ready := runningStatus(running("c", true))
	ready.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: v1.PodScheduled, Status: v1.ConditionTrue}}
	ready.PodIPs, ready.PodIP, ready.HostIPs = []v1.PodIP{{IP: "10.0.0.2"}}, "10.0.0.2", []v1.HostIP{{IP: "192.0.2.1"}}
	notReady := *ready.DeepCopy()
	notReady.Conditions[0].Status, notReady.ContainerStatuses[0].Ready = v1.ConditionFalse, false
	notReady.Conditions = append(notReady.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"})
	done := runningStatus(exited("c", 1))
	done.Phase, done.Message, done.Reason = v1.PodFailed, "gone", "Evicted"
	pairs := []struct{ old, next v1.PodStatus }{
		{v1.PodStatus{}, ready}, {ready, notReady}, {notReady, ready}, {ready, done}, {done, done}, {ready, v1.PodStatus{}},
	}
	for i, p := range pairs {
		for _, rv := range []string{"", "42"} {
			got, _, err := podStatusPatch("u1", rv, &p.old, &p.next)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := json.Marshal(v1.Pod{Status: p.old})
			after, _ := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: rv}, Status: p.next})
			want, err := strategicpatch.CreateTwoWayMergePatch(before, after, v1.Pod{})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("pair %d, resourceVersion %q: patch\n%s\nwant\n%s", i, rv, got, want)
			}
		}
	}
}

func schemaGR(resource string) schema.GroupResource { return schema.GroupResource{Resource: resource} }
