package dra

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// How a pod's spec.resourceClaims entries name their ResourceClaim
// objects, and whether a fetched claim may serve the pod. These are the
// rules of k8s.io/dynamic-resource-allocation/resourceclaim with claims
// owned by or reserved for a PodGroup not accepted: that is kubelet
// v1.37 with the DRAWorkloadResourceClaims gate at its default (off),
// and fullagent refuses to start with the gate on. Written here so that
// the agent does not link that package's scheduling.k8s.io/v1beta1
// PodGroup API (0.24 MiB of the release binary, nearly all of it
// resident).

var (
	// errClaimNotCreated: a claim from a template whose ResourceClaim
	// the controller has not created and recorded in the pod's status.
	errClaimNotCreated = errors.New("ResourceClaim not created yet")
	// errClaimUnsupported: neither resourceClaimName nor
	// resourceClaimTemplateName is set.
	errClaimUnsupported = errors.New("none of the supported fields are set")
)

// claimObjectName is the name of the ResourceClaim the pod's claim entry pc
// refers to. A nil name and no error: the claim was deliberately not
// created (the controller recorded no name in status) and the entry is
// to be skipped. mustOwn: the claim was made from a template for this
// pod, so the fetched object must be controlled by the pod.
func claimObjectName(pod *v1.Pod, pc *v1.PodResourceClaim) (name *string, mustOwn bool, err error) {
	if pc.ResourceClaimName != nil {
		return pc.ResourceClaimName, false, nil
	}
	if pc.ResourceClaimTemplateName == nil {
		return nil, false, fmt.Errorf(`pod "%s/%s", spec.resourceClaim %q: %w`, pod.Namespace, pod.Name, pc.Name, errClaimUnsupported)
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == pc.Name {
			return st.ResourceClaimName, true, nil
		}
	}
	return nil, false, fmt.Errorf(`pod "%s/%s": %w`, pod.Namespace, pod.Name, errClaimNotCreated)
}

// claimOwnedByPod checks that claim, made from a template, is the one
// made for pod: same namespace, and the pod is its controller.
func claimOwnedByPod(pod *v1.Pod, claim *resourcev1.ResourceClaim) error {
	if claim.Namespace != pod.Namespace {
		return fmt.Errorf("ResourceClaim %s/%s is not in the same namespace as Pod %s/%s", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	if !metav1.IsControlledBy(claim, pod) {
		return fmt.Errorf("ResourceClaim %s/%s was not created for Pod %s/%s (Pod is not owner)", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	return nil
}

// claimReservedForPod reports whether the scheduler reserved claim for
// pod (the pod's UID among status.reservedFor).
func claimReservedForPod(pod *v1.Pod, claim *resourcev1.ResourceClaim) bool {
	for _, r := range claim.Status.ReservedFor {
		if r.UID == pod.UID {
			return true
		}
	}
	return false
}

// baseRequest is the request part of a request reference: "gpu" for
// both "gpu" and its subrequest "gpu/large".
func baseRequest(ref string) string {
	base, _, _ := strings.Cut(ref, "/")
	return base
}
