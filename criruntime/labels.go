package criruntime

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The label and annotation keys the upstream kubelet (v1.37) puts on CRI
// objects, with the same values: a node can be handed from kubelet to a
// nodekit agent and back with its containers running, because each reads
// the other's containers as its own (same hash, same restart count). Labels
// name the pod and container; annotations carry what the agent reads back
// about a container whose pod spec it may no longer have.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationHash                     = "io.kubernetes.container.hash"
	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	annotationPreStopHandler           = "io.kubernetes.container.preStopHandler"
	annotationPorts                    = "io.kubernetes.container.ports"
	annotationGracePeriod              = "io.kubernetes.pod.terminationGracePeriod"
	annotationDeletionGracePeriod      = "io.kubernetes.pod.deletionGracePeriod"
)

// podLabels are a sandbox's labels: the pod's own labels plus its name,
// namespace and UID (which win over pod labels of the same key).
func podLabels(pod *v1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[labelPodName] = pod.Name
	l[labelPodNamespace] = pod.Namespace
	l[labelPodUID] = string(pod.UID)
	return l
}

// containerLabels are a container's labels: its pod and its name, nothing
// else (pod labels stay on the sandbox). Whether it is an init container or
// a sidecar is read from the pod spec by name, as upstream does.
func containerLabels(pod *v1.Pod, c *v1.Container) map[string]string {
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		labelPodUID:        string(pod.UID),
		labelContainerName: c.Name,
	}
}

// containerAnnotations are a container's annotations: extra (from device
// plugins) overridden by the agent's own keys. The preStop handler and the
// ports are JSON of their API types; grace periods are decimal seconds.
func containerAnnotations(pod *v1.Pod, c *v1.Container, restartCount int, extra map[string]string) (map[string]string, error) {
	a := make(map[string]string, len(extra)+8)
	for k, v := range extra {
		a[k] = v
	}
	a[annotationHash] = strconv.FormatUint(HashContainer(c), 16)
	a[annotationRestartCount] = strconv.Itoa(restartCount)
	a[annotationTerminationMessagePath] = c.TerminationMessagePath
	a[annotationTerminationMessagePolicy] = string(c.TerminationMessagePolicy)
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		a[annotationDeletionGracePeriod] = strconv.FormatInt(*g, 10)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		a[annotationGracePeriod] = strconv.FormatInt(*g, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		b, err := json.Marshal(c.Lifecycle.PreStop)
		if err != nil {
			return nil, fmt.Errorf("container %q: lifecycle.preStop: %w", c.Name, err)
		}
		a[annotationPreStopHandler] = string(b)
	}
	if len(c.Ports) > 0 {
		b, err := json.Marshal(c.Ports)
		if err != nil {
			return nil, fmt.Errorf("container %q: ports: %w", c.Name, err)
		}
		a[annotationPorts] = string(b)
	}
	return a, nil
}

// HashContainer returns the hash upstream kubelet v1.37 stores in
// io.kubernetes.container.hash, so that either agent reads the other's
// containers as unchanged. It covers the container's name and image only:
// in a running pod those are the only container fields an update can
// change that need a new container (resources resize in place). The value
// is FNV-32a over the JSON object {"image","name"} as upstream feeds it to
// the hash: a Go-syntax dump of the JSON bytes, "([]uint8)[123 34 ...]"
// (k8s.io/utils/dump.ForHash of a byte slice). It is written in hexadecimal.
func HashContainer(c *v1.Container) uint64 {
	b, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image}) // strings always marshal
	h := fnv.New32a()
	fmt.Fprintf(h, "([]uint8)%v", b)
	return uint64(h.Sum32())
}

func parseUint(s string) uint64 {
	v, _ := strconv.ParseUint(s, 16, 64)
	return v
}

func parseInt(s string) int {
	v, _ := strconv.Atoi(s)
	return v
}

func podUIDOf(labels map[string]string) types.UID { return types.UID(labels[labelPodUID]) }

func nanoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
