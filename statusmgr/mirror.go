package statusmgr

import (
	"context"
	"fmt"
	"maps"

	"github.com/nodekit/nodekit/kubeclient"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/podutil"
)

// MirrorClient creates and deletes mirror pods: the API server's read-only
// copies of the node's static pods. It works with the node's own
// credentials. Safe for concurrent use.
type MirrorClient struct {
	client   kubeclient.Interface
	nodeName string
}

// NewMirrorClient returns a MirrorClient for node nodeName.
func NewMirrorClient(client kubeclient.Interface, nodeName string) *MirrorClient {
	return &MirrorClient{client: client, nodeName: nodeName}
}

// CreateMirrorPod creates the mirror pod of static: same name, namespace,
// labels, annotations and spec, plus the annotation
// kubernetes.io/config.mirror set to the static pod's kubernetes.io/config.hash
// and a controller owner reference to this node's Node object (the API
// server requires one from nodes). An empty spec.nodeName is set to the
// node; another node's name is an error. If a mirror pod with the same hash
// exists already it succeeds; one with another hash is an error (delete it
// first). It reads the Node (for its UID) and blocks on the API server.
func (c *MirrorClient) CreateMirrorPod(ctx context.Context, static *v1.Pod) error {
	if static == nil {
		return fmt.Errorf("%w: CreateMirrorPod: pod is nil", ErrInvalid)
	}
	switch static.Spec.NodeName {
	case "", c.nodeName:
	default:
		return fmt.Errorf("%w: static pod %s/%s: spec.nodeName is %q, not this node %q",
			ErrInvalid, static.Namespace, static.Name, static.Spec.NodeName, c.nodeName)
	}
	node, err := c.client.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("mirror pod %s/%s: get Node %s for the owner reference: %w", static.Namespace, static.Name, c.nodeName, err)
	}
	hash := static.Annotations[annotationConfigHash]
	annotations := maps.Clone(static.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[v1.MirrorPodAnnotationKey] = hash
	controller := true
	mirror := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        static.Name,
			Namespace:   static.Namespace,
			Labels:      maps.Clone(static.Labels),
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Node",
				Name:       c.nodeName,
				UID:        node.UID,
				Controller: &controller,
			}},
		},
		Spec: *static.Spec.DeepCopy(),
	}
	mirror.Spec.NodeName = c.nodeName
	pods := c.client.CoreV1().Pods(static.Namespace)
	_, err = pods.Create(ctx, mirror, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create mirror pod %s/%s: %w", static.Namespace, static.Name, err)
		}
		klog.FromContext(ctx).V(3).Info("Created mirror pod", "pod", klog.KObj(mirror), "hash", hash)
		return nil
	}
	existing, gerr := pods.Get(ctx, static.Name, metav1.GetOptions{})
	if gerr != nil {
		return fmt.Errorf("create mirror pod %s/%s: %w; reading the existing one: %w", static.Namespace, static.Name, err, gerr)
	}
	if h, ok := existing.Annotations[v1.MirrorPodAnnotationKey]; ok && h == hash {
		return nil
	}
	return fmt.Errorf("create mirror pod %s/%s: a pod of that name exists and is not this static pod's mirror (hash %q): %w",
		static.Namespace, static.Name, hash, err)
}

// DeleteMirrorPod deletes the mirror pod with the given full name
// (name_namespace) with grace period 0; with uid set, only if the pod has
// that UID. It reports whether a pod was deleted: a missing pod or a UID
// mismatch is (false, nil). A malformed name or an API failure is an error.
func (c *MirrorClient) DeleteMirrorPod(ctx context.Context, fullName string, uid *types.UID) (bool, error) {
	name, namespace, err := podutil.ParseFullName(fullName)
	if err != nil {
		return false, fmt.Errorf("%w: DeleteMirrorPod: %w", ErrInvalid, err)
	}
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: uid}}
	err = c.client.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	switch {
	case err == nil:
		klog.FromContext(ctx).V(3).Info("Deleted mirror pod", "pod", klog.KRef(namespace, name))
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	}
	return false, fmt.Errorf("delete mirror pod %s/%s: %w", namespace, name, err)
}
