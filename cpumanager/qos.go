package cpumanager

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/qos"
)

// guaranteed reports whether pod's QoS class is Guaranteed, as upstream
// computes it.
func guaranteed(pod *v1.Pod) bool { return qos.Class(pod) == v1.PodQOSGuaranteed }
