package syncloop

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/qos"
)

// QOSClass computes a pod's quality-of-service class as upstream:
// BestEffort, Burstable or Guaranteed.
func QOSClass(pod *v1.Pod) v1.PodQOSClass { return qos.Class(pod) }
