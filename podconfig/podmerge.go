package podconfig

import (
	"maps"
	"reflect"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

// podChange is what a new version of a known pod means for the receiver.
type podChange int

const (
	noChange         podChange = iota
	specChanged                // UPDATE
	gracefulDeletion           // DELETE
	statusChanged              // RECONCILE
)

// isLocalAnnotation reports the annotations the node agent sets, not the
// pod's author: they neither count as a change nor get overwritten by one.
func isLocalAnnotation(key string) bool {
	switch key {
	case ConfigSourceAnnotation, ConfigMirrorAnnotation, ConfigSeenAnnotation:
		return true
	}
	return false
}

// mergeInto returns the merger's new version of a pod it holds as existing,
// brought up to date with ref (a newer version from the same source), and
// says what changed. As upstream, the fields that matter are taken from ref
// and the local annotations kept; a status-only change takes the status
// alone. The resourceVersion is always brought up to date (it is no change
// by itself), so the pods the receiver keeps name the version whose status
// they carry: the status manager's sink patches against it with that
// version as precondition.
//
// existing is never modified: what differs goes into a shallow copy of it
// (its maps and slices shared, for nobody modifies them), so a pod handed
// to the receiver stays as it was handed (WithSharedPods). existing itself
// is returned when nothing, not even the resourceVersion, differs.
func mergeInto(existing, ref *v1.Pod) (*v1.Pod, podChange) {
	differs := differsSemantically(existing, ref)
	sameStatus := !differs && semanticEqual(&existing.Status, &ref.Status)
	if sameStatus && existing.ResourceVersion == ref.ResourceVersion {
		return existing, noChange
	}
	next := *existing
	next.ResourceVersion = ref.ResourceVersion
	if !differs {
		if sameStatus {
			return &next, noChange
		}
		next.Status = ref.Status
		return &next, statusChanged
	}
	next.Spec = ref.Spec
	next.Labels = ref.Labels
	next.DeletionTimestamp = ref.DeletionTimestamp
	next.DeletionGracePeriodSeconds = ref.DeletionGracePeriodSeconds
	next.Generation = ref.Generation
	next.Status = ref.Status
	annotations := make(map[string]string, len(ref.Annotations)+3)
	for k, v := range ref.Annotations {
		annotations[k] = v
	}
	for k, v := range existing.Annotations {
		if isLocalAnnotation(k) {
			annotations[k] = v
		}
	}
	next.Annotations = annotations
	if ref.DeletionTimestamp != nil {
		return &next, gracefulDeletion
	}
	return &next, specChanged
}

// differsSemantically reports a change the receiver must act on: spec,
// labels, deletion timestamp or grace period, or annotations other than the
// local ones.
func differsSemantically(existing, ref *v1.Pod) bool {
	return !semanticEqual(&existing.Spec, &ref.Spec) ||
		!maps.Equal(existing.Labels, ref.Labels) ||
		!semanticEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) ||
		!ptr.Equal(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) ||
		!sameAnnotations(existing.Annotations, ref.Annotations)
}

// semanticEqual is equality.Semantic.DeepEqual (which compares quantities
// and times by value and nil and empty collections as equal) with
// reflect.DeepEqual, several times cheaper, as a fast path: what is deeply
// equal is semantically equal. Pass pointers to large structs, so they are
// not copied into interfaces.
func semanticEqual(a, b any) bool {
	return reflect.DeepEqual(a, b) || equality.Semantic.DeepEqual(a, b)
}

// sameAnnotations compares two annotation maps ignoring the local keys.
func sameAnnotations(a, b map[string]string) bool {
	for k, v := range b {
		if isLocalAnnotation(k) {
			continue
		}
		if av, ok := a[k]; !ok || av != v {
			return false
		}
	}
	for k := range a {
		if isLocalAnnotation(k) {
			continue
		}
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}
