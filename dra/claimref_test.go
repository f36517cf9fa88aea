package dra

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"
)

// The claim helpers answer as k8s.io/dynamic-resource-allocation's
// resourceclaim package does with PodGroup claims not accepted (kubelet
// with DRAWorkloadResourceClaims off), case by case.

func claimPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "pod-uid"},
		Spec:       v1.PodSpec{SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("group")}},
		Status: v1.PodStatus{ResourceClaimStatuses: []v1.PodResourceClaimStatus{
			{Name: "made", ResourceClaimName: ptr.To("web-made-x7")},
			{Name: "skipped"},
		}},
	}
}

func TestClaimObjectNameAsUpstream(t *testing.T) {
	pod := claimPod()
	for _, pc := range []v1.PodResourceClaim{
		{Name: "direct", ResourceClaimName: ptr.To("shared")},
		{Name: "made", ResourceClaimTemplateName: ptr.To("tmpl")},
		{Name: "skipped", ResourceClaimTemplateName: ptr.To("tmpl")},
		{Name: "pending", ResourceClaimTemplateName: ptr.To("tmpl")},
		{Name: "empty"},
	} {
		name, own, err := claimObjectName(pod, &pc)
		wantName, wantOwn, wantErr := resourceclaim.Name(pod, &pc)
		if ptr.Deref(name, "<nil>") != ptr.Deref(wantName, "<nil>") || (name == nil) != (wantName == nil) || own != wantOwn {
			t.Errorf("%s: got %v %v, upstream %v %v", pc.Name, ptr.Deref(name, "<nil>"), own, ptr.Deref(wantName, "<nil>"), wantOwn)
		}
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Errorf("%s: error %v, upstream %v", pc.Name, err, wantErr)
		}
	}
	_, _, err := claimObjectName(pod, &v1.PodResourceClaim{Name: "pending", ResourceClaimTemplateName: ptr.To("t")})
	if !errors.Is(err, errClaimNotCreated) {
		t.Errorf("a template claim not in status: %v, want errClaimNotCreated", err)
	}
}

func TestClaimOwnershipAndReservationAsUpstream(t *testing.T) {
	pod := claimPod()
	owner := func(kind, apiVersion, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: uid, Controller: ptr.To(true)}}
	}
	claims := map[string]*resourcev1.ResourceClaim{
		"owned, reserved": {
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", OwnerReferences: owner("Pod", "v1", "web", "pod-uid")},
			Status:     resourcev1.ResourceClaimStatus{ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "web", UID: "pod-uid"}}},
		},
		"other namespace": {ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "other", OwnerReferences: owner("Pod", "v1", "web", "pod-uid")}},
		"another pod's":   {ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", OwnerReferences: owner("Pod", "v1", "web", "old-uid")}},
		"the pod group's, reserved for the group": {
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", OwnerReferences: owner("PodGroup", "scheduling.k8s.io/v1beta1", "group", "g-uid")},
			Status:     resourcev1.ResourceClaimStatus{ReservedFor: []resourcev1.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "group", UID: "g-uid"}}},
		},
		"not reserved": {ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}},
	}
	for what, c := range claims {
		err, want := claimOwnedByPod(pod, c), resourceclaim.IsForPod(pod, c, false)
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Errorf("%s: owned: %v, upstream %v", what, err, want)
		}
		if got, want := claimReservedForPod(pod, c), resourceclaim.IsReservedForPod(pod, c, false); got != want {
			t.Errorf("%s: reserved: %v, upstream %v", what, got, want)
		}
	}
	if claimOwnedByPod(pod, claims["owned, reserved"]) != nil || !claimReservedForPod(pod, claims["owned, reserved"]) {
		t.Error("the pod's own reserved claim is refused")
	}
	if claimReservedForPod(pod, claims["the pod group's, reserved for the group"]) {
		t.Error("a claim reserved for the pod's group is accepted with DRAWorkloadResourceClaims off")
	}
}

func TestBaseRequestAsUpstream(t *testing.T) {
	for _, ref := range []string{"", "gpu", "gpu/large", "a/b/c"} {
		if got, want := baseRequest(ref), resourceclaim.BaseRequestRef(ref); got != want {
			t.Errorf("baseRequest(%q) = %q, upstream %q", ref, got, want)
		}
	}
}
