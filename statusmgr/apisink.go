package statusmgr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nodekit/nodekit/kubeclient"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podstatus"
	"github.com/nodekit/nodekit/internal/smpatch"
)

// APISink is the nodekit.StatusSink of a node in a cluster: it patches
// pods/status in the API server and deletes finished pods. It works with
// the node's own credentials (the Node authorizer and NodeRestriction allow
// exactly this for pods bound to the node). Safe for concurrent use.
type APISink struct {
	client kubeclient.Interface

	mu sync.Mutex
	// written holds, per pod UID, the API server's status and
	// resourceVersion after the sink's last write, while the pods the caller
	// passes are older (its informer has not yet seen the write); see
	// SetPodStatus.
	written map[types.UID]writtenStatus
}

// writtenStatus is a pod's status as a status patch's response had it.
type writtenStatus struct {
	resourceVersion string
	status          *v1.PodStatus
}

var _ nodekit.StatusSink = (*APISink)(nil)

// NewAPISink returns a sink writing through client.
func NewAPISink(client kubeclient.Interface) *APISink {
	return &APISink{client: client, written: map[types.UID]writtenStatus{}}
}

// SetPodStatus patches the pod's status subresource with a strategic merge
// patch. The patch is computed against the newest version of the pod the
// sink knows without asking: pod itself (an informer's copy, as
// Config.Pods gives) or, when the sink's own last write is newer, the
// status that write's response carried; that version's resourceVersion
// goes into the patch as a precondition, so the patch applies only if
// nothing changed the pod since — else the API server answers with a
// conflict and the sink reads the pod (GET) and patches against what it
// read. A pod without a resourceVersion (not from an API server) is read
// first. So a pod costs one PATCH per status change and no GET while
// nobody else writes it (kubelet GETs the pod before every patch). When
// the read is forbidden, as it is with node credentials for a
// pod the Node authorizer does not yet, or no longer, link to the node, it
// patches against pod.Status without a precondition. The patch carries
// metadata.uid, so it can only apply to the pod it was computed for: a pod
// recreated under the same name is never overwritten. Conditions the node
// agent does not own, the qosClass and resource-claim statuses are kept as
// the API server has them; a terminal phase is held back while status
// still shows a running container. A pod that is gone (404) or was
// recreated (other UID) needs no status: nil. After a conflict on a patch
// against what it read, it reads again and retries once; other errors are
// returned for the caller to retry.
func (s *APISink) SetPodStatus(ctx context.Context, pod *v1.Pod, status *v1.PodStatus) error {
	logger := klog.FromContext(ctx)
	pods := s.client.CoreV1().Pods(pod.Namespace)
	cur, optimistic := s.known(pod)
	for retries := 1; ; retries-- {
		if !optimistic {
			var done bool
			var err error
			if cur, done, err = s.read(ctx, pod); done || err != nil {
				return err
			}
		}
		if cur.UID != pod.UID {
			logger.V(2).Info("Pod was recreated; status of the old one not published", "pod", klog.KObj(pod), "oldUID", pod.UID, "newUID", cur.UID)
			s.forget(pod.UID)
			return nil
		}
		merged := mergeForAPI(&cur.Status, status)
		precondition := ""
		if optimistic {
			precondition = cur.ResourceVersion
		}
		patch, unchanged, err := podStatusPatch(cur.UID, precondition, &cur.Status, merged)
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if unchanged {
			return nil
		}
		written, err := pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		switch {
		case err == nil:
			logger.V(4).Info("Patched pod status", "pod", klog.KObj(pod), "patch", string(patch))
			s.remember(pod.UID, written)
			return nil
		case apierrors.IsNotFound(err):
			s.forget(pod.UID)
			return nil
		case uidMismatch(err):
			logger.V(2).Info("Pod was recreated; status of the old one not published", "pod", klog.KObj(pod), "oldUID", pod.UID)
			s.forget(pod.UID)
			return nil
		case optimistic && (apierrors.IsConflict(err) || apierrors.IsInvalid(err)):
			// The pod changed since the version we knew; read it.
			logger.V(4).Info("Pod status patch against the known version refused; reading the pod", "pod", klog.KObj(pod), "resourceVersion", precondition, "err", err)
			optimistic, retries = false, retries+1
			continue
		case retries > 0 && (apierrors.IsConflict(err) || apierrors.IsInvalid(err)):
			// The pod changed under us; read it again.
			logger.V(3).Info("Pod status patch refused; retrying once", "pod", klog.KObj(pod), "err", err)
			continue
		}
		return fmt.Errorf("patch status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

// read GETs the pod. done (with a nil error) means there is nothing to
// publish: the pod is gone. A forbidden read gives pod itself.
func (s *APISink) read(ctx context.Context, pod *v1.Pod) (cur *v1.Pod, done bool, err error) {
	logger := klog.FromContext(ctx)
	cur, err = s.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		logger.V(3).Info("Pod is gone from the API server; status not published", "pod", klog.KObj(pod), "podUID", pod.UID)
		s.forget(pod.UID)
		return nil, true, nil
	case apierrors.IsForbidden(err):
		// The Node authorizer lets a node read only the pods its graph
		// links to the node: not one created a moment ago, nor one
		// deleted. Patch against the status we were given; the API
		// server's answer to the patch says whether the pod exists.
		logger.V(4).Info("Pod not readable with the node's credentials; patching against the known status", "pod", klog.KObj(pod), "err", err)
		return pod, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return cur, false, nil
}

// known is the newest version of pod the sink knows without a request:
// the response of its own last write when that is newer than pod, else pod
// itself; ok is false when neither has a resourceVersion to patch
// against. An entry pod has caught up with is dropped.
func (s *APISink) known(pod *v1.Pod) (*v1.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.written[pod.UID]; ok {
		if newerResourceVersion(w.resourceVersion, pod.ResourceVersion) {
			cur := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: w.resourceVersion}, Status: *w.status}
			return cur, true
		}
		delete(s.written, pod.UID)
	}
	return pod, pod.ResourceVersion != ""
}

// remember keeps the status a write's response carried, for the next
// write before the caller's copy of the pod catches up.
func (s *APISink) remember(uid types.UID, written *v1.Pod) {
	if written == nil || written.UID != uid || written.ResourceVersion == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A copy of the status alone: a pointer into written would keep the
	// whole response (spec, managedFields) alive.
	status := written.Status
	s.written[uid] = writtenStatus{resourceVersion: written.ResourceVersion, status: &status}
}

// CaughtUp drops what the sink keeps of pod once pod, as the caller's
// informer has it, is at least as new as the sink's last write: from then
// on pod itself is the version to patch against. Without it a pod's last
// response stays kept until its next write, which for a pod that runs on
// unchanged never comes (about 2 KB a pod). The Manager calls it with
// each pod it reads from Config.Pods when it plans a sync.
func (s *APISink) CaughtUp(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.written[pod.UID]; ok && !newerResourceVersion(w.resourceVersion, pod.ResourceVersion) {
		delete(s.written, pod.UID)
	}
}

// forget drops what the sink keeps of a pod.
func (s *APISink) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, uid)
}

// ForgetPods drops what the sink keeps of the pods whose UID is not in
// keep (the status manager calls it from RemoveOrphanedStatuses).
func (s *APISink) ForgetPods(keep map[types.UID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.written {
		if !keep[uid] {
			delete(s.written, uid)
		}
	}
}

// newerResourceVersion reports whether resourceVersion a is newer than b.
// The API server's are integers (etcd revisions); one that is not an
// integer is not taken for newer, except over an empty one.
func newerResourceVersion(a, b string) bool {
	if b == "" {
		return a != ""
	}
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// DeletePod deletes the pod object with grace period 0 and its UID as
// precondition, so a pod recreated under the same name survives. A missing
// pod, or one whose UID differs, is done: nil. On a conflict it reads the
// pod and retries once if it is still the same pod. Other errors are
// returned.
func (s *APISink) DeletePod(ctx context.Context, pod *v1.Pod) error {
	pods := s.client.CoreV1().Pods(pod.Namespace)
	uid := pod.UID
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}}
	for attempt := 0; ; attempt++ {
		err := pods.Delete(ctx, pod.Name, opts)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if attempt > 0 || !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s/%s (uid %s): %w", pod.Namespace, pod.Name, uid, err)
		}
		cur, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			return nil
		}
		if gerr != nil {
			return fmt.Errorf("delete pod %s/%s: %w; reading it back: %w", pod.Namespace, pod.Name, err, gerr)
		}
		if cur.UID != uid {
			return nil
		}
	}
}

// uidMismatch reports whether err is the API server refusing a write
// because the object's UID is not the one in the request: a patch carrying
// another metadata.uid is invalid ("field is immutable"), a UID
// precondition fails with a conflict.
func uidMismatch(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	st := status.Status()
	if apierrors.IsConflict(err) {
		return strings.Contains(st.Message, "UID in precondition")
	}
	if !apierrors.IsInvalid(err) || st.Details == nil {
		return false
	}
	for _, c := range st.Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// mergeForAPI builds the status to send from the API server's current one
// (api) and ours: conditions the node agent does not own stay as the API
// server has them (a PodScheduled condition is kept too when ours has
// none), DisruptionTarget is added only when the pod turns terminal,
// resource-claim statuses are not ours to write, and a terminal phase waits
// until no container runs.
func mergeForAPI(api, ours *v1.PodStatus) *v1.PodStatus {
	out := ours.DeepCopy()
	toTerminal := !podstatus.IsTerminal(api.Phase) && podstatus.IsTerminal(out.Phase)
	running := couldHaveRunningContainers(out)
	conds := make([]v1.PodCondition, 0, len(api.Conditions)+len(out.Conditions))
	for _, c := range api.Conditions {
		keepScheduled := c.Type == v1.PodScheduled && podstatus.Find(out.Conditions, v1.PodScheduled) == nil
		if !podstatus.OwnedByKubelet(c.Type) || keepScheduled {
			conds = append(conds, c)
		}
	}
	for _, c := range out.Conditions {
		switch {
		case podstatus.OwnedByKubelet(c.Type):
			conds = append(conds, c)
		case podstatus.SharedWithKubelet(c.Type) && toTerminal && !running:
			replaced := false
			for i := range conds {
				if conds[i].Type == c.Type {
					conds[i], replaced = c, true
				}
			}
			if !replaced {
				conds = append(conds, c)
			}
		}
	}
	out.Conditions = conds
	if out.QOSClass == "" {
		out.QOSClass = api.QOSClass
	}
	out.ResourceClaimStatuses = api.ResourceClaimStatuses
	out.ExtendedResourceClaimStatus = api.ExtendedResourceClaimStatus
	out.NodeAllocatableResourceClaimStatuses = api.NodeAllocatableResourceClaimStatuses
	if toTerminal && running {
		out.Phase, out.Reason, out.Message = api.Phase, api.Reason, api.Message
	}
	return out
}

// podStatusPatch is the strategic merge patch from old to next, with
// metadata.uid so the API server refuses it for another pod and, when
// resourceVersion is not empty, metadata.resourceVersion, so it refuses it
// once the pod has changed since that version. unchanged reports that the
// patch would carry nothing but the metadata.
//
// The two documents are statusDocs, not v1.Pods: the patch is the same
// (the fields of a Pod the documents leave out are equal in both), but
// encoding/json keeps the encoders of every type it has marshalled for
// the life of the process, and a v1.Pod's reach the whole PodSpec (about
// 340 KB of heap, against 65 KB for the status's).
func podStatusPatch(uid types.UID, resourceVersion string, old, next *v1.PodStatus) (patch []byte, unchanged bool, err error) {
	before, err := json.Marshal(statusDoc{Status: old})
	if err != nil {
		return nil, false, fmt.Errorf("encode current status: %w", err)
	}
	meta := statusDocMeta{UID: uid, ResourceVersion: resourceVersion}
	after, err := json.Marshal(statusDoc{Metadata: meta, Status: next})
	if err != nil {
		return nil, false, fmt.Errorf("encode new status: %w", err)
	}
	patch, err = smpatch.TwoWay(before, after, v1.Pod{})
	if err != nil {
		return nil, false, fmt.Errorf("compute status patch: %w", err)
	}
	// The patch is a marshalled map, keys sorted, as this one.
	only, err := json.Marshal(statusDoc{Metadata: meta})
	if err != nil {
		return nil, false, err
	}
	return patch, bytes.Equal(patch, only), nil
}

// statusDoc is the part of a Pod's JSON a status patch is computed from.
type statusDoc struct {
	Metadata statusDocMeta `json:"metadata"`
	Status   *v1.PodStatus `json:"status,omitempty"`
}

// statusDocMeta is the metadata a status patch carries, keys in the
// order a marshalled map has them.
type statusDocMeta struct {
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	UID             types.UID `json:"uid,omitempty"`
}
