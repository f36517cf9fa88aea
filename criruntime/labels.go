package criruntime

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The label and annotation keys the upstream kubelet puts on CRI objects. We
// use the same ones so that crictl, log collectors and a restarted agent see
// familiar names.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	labelContainerType = "io.kubernetes.container.type" // not upstream: "init" or "regular"

	annotationHash                     = "io.kubernetes.container.hash"
	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	annotationGracePeriod              = "io.kubernetes.pod.terminationGracePeriod"
	annotationSidecar                  = "io.kubernetes.container.sidecar" // not upstream: restartable init container
)

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

func containerLabels(pod *v1.Pod, c *v1.Container, init bool) map[string]string {
	typ := "regular"
	if init {
		typ = "init"
	}
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		labelPodUID:        string(pod.UID),
		labelContainerName: c.Name,
		labelContainerType: typ,
	}
}

func containerAnnotations(pod *v1.Pod, c *v1.Container, restartCount int, sidecar bool, extra map[string]string) map[string]string {
	a := make(map[string]string, len(extra)+6)
	for k, v := range extra {
		a[k] = v
	}
	a[annotationHash] = strconv.FormatUint(HashContainer(c), 16)
	a[annotationRestartCount] = strconv.Itoa(restartCount)
	a[annotationTerminationMessagePath] = c.TerminationMessagePath
	a[annotationTerminationMessagePolicy] = string(c.TerminationMessagePolicy)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[annotationGracePeriod] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if sidecar {
		a[annotationSidecar] = "true"
	}
	return a
}

// HashContainer returns a hash of the parts of a container spec that require
// a new container when they change. Resources are left out: they can be
// updated in place.
func HashContainer(c *v1.Container) uint64 {
	cp := c.DeepCopy()
	cp.Resources = v1.ResourceRequirements{}
	cp.ResizePolicy = nil
	b, _ := json.Marshal(cp) // a Container always marshals
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
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
