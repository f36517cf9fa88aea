package podutil

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// Annotations the pod sources stamp on pods and the API server sets on
// mirror pods.
const (
	// ConfigSourceAnnotation names the source a pod came from: "api" for
	// the API server, anything else for a manifest file or URL.
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	// ConfigMirrorAnnotation is present on a mirror pod and holds the
	// config hash of the static pod it mirrors.
	ConfigMirrorAnnotation = v1.MirrorPodAnnotationKey
	// ConfigHashAnnotation is the hash the static sources give a pod.
	ConfigHashAnnotation = "kubernetes.io/config.hash"
)

// IsStatic reports whether pod came from a source other than the API
// server. The source annotation decides: absent means not static; any
// value but nodekit.SourceAPI, the empty string included, means static,
// as upstream's kubetypes.IsStaticPod.
func IsStatic(pod *v1.Pod) bool {
	src, present := pod.Annotations[ConfigSourceAnnotation]
	if !present {
		return false
	}
	return src != nodekit.SourceAPI
}

// IsMirror reports whether pod is a mirror pod: it carries the
// config.mirror annotation, whatever its value.
func IsMirror(pod *v1.Pod) bool {
	_, present := pod.Annotations[ConfigMirrorAnnotation]
	return present
}

// IsSidecar reports whether c, an init container, is a sidecar: its own
// restart policy is Always, so it keeps running beside the regular
// containers. The caller knows c is an init container; a regular container
// never carries a restart policy.
func IsSidecar(c *v1.Container) bool {
	if c.RestartPolicy == nil {
		return false
	}
	return *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// FullName is the pod's name joined to its namespace by an underscore,
// NAME_NAMESPACE: the name upstream's kubelet (kubecontainer.GetPodFullName)
// gives a pod and the key a static pod and its mirror share.
func FullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// ParseFullName splits a FullName back into name and namespace. Neither part
// may be empty, and the namespace may hold no underscore (a name or
// namespace never does).
func ParseFullName(full string) (name, namespace string, err error) {
	name, namespace, found := strings.Cut(full, "_")
	if !found || name == "" || namespace == "" || strings.Contains(namespace, "_") {
		return "", "", fmt.Errorf("pod full name %q is not of the form name_namespace", full)
	}
	return name, namespace, nil
}

// NamespacedKey is NAMESPACE/NAME, the key client-go's caches use. It names
// the same pod as FullName does; it is for maps keyed by pod identity, not
// for calls that take upstream's full name.
func NamespacedKey(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// ResolveRecursiveReadOnly decides whether a volume mount is made
// recursively read-only, as upstream's resolveRecursiveReadOnly: never
// without recursiveReadOnly or with Disabled; an error when the mount is
// not read-only or has a propagation other than None; IfPossible when the
// pod's runtime handler supports it (supported); Enabled only then, an
// error otherwise.
func ResolveRecursiveReadOnly(m v1.VolumeMount, supported bool) (bool, error) {
	if m.RecursiveReadOnly == nil || *m.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !m.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", m.Name)
	}
	if m.MountPropagation != nil && *m.MountPropagation != v1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", m.Name, *m.MountPropagation)
	}
	switch mode := *m.RecursiveReadOnly; mode {
	case v1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case v1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", m.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}
