package allocation

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The reasons of the events a resize records on its pod, as upstream
// kubelet's.
const (
	EventResizeStarted    = "ResizeStarted"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeError      = "ResizeError"
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
)

// Recorder records an event on an object; client-go's
// record.EventRecorder satisfies it.
type Recorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// resizeSummary is the JSON an event message carries after its prefix:
// the containers' resources as the pod's spec has them (init containers
// apart; pod-level resources are not in it, as upstream's is not), the
// generation, and the error if there is one.
type resizeSummary struct {
	InitContainers []containerResources `json:"initContainers,omitempty"`
	Containers     []containerResources `json:"containers,omitempty"`
	Generation     int64                `json:"generation"`
	Error          string               `json:"error,omitempty"`
}

type containerResources struct {
	Name      string                  `json:"name"`
	Resources v1.ResourceRequirements `json:"resources,omitempty"`
}

// resizeMessage is "PREFIX: SUMMARY", upstream's event text.
func resizeMessage(prefix string, pod *v1.Pod, gen int64, errMsg string) string {
	s := resizeSummary{Generation: gen, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainers = append(s.InitContainers, containerResources{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		s.Containers = append(s.Containers, containerResources{Name: c.Name, Resources: c.Resources})
	}
	b, err := json.Marshal(s)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, b)
}

// event records on pod when a Recorder is configured.
func (m *Manager) event(pod *v1.Pod, eventtype, reason, message string) {
	if m.cfg.Recorder != nil {
		m.cfg.Recorder.Eventf(pod, eventtype, reason, "%s", message)
	}
}

// pendingEvent records ResizeInfeasible or ResizeDeferred for a resize
// left pending.
func (m *Manager) pendingEvent(pod *v1.Pod, p *Pending) {
	reason := EventResizeDeferred
	if p.Reason == v1.PodReasonInfeasible {
		reason = EventResizeInfeasible
	}
	m.event(pod, v1.EventTypeWarning, reason, resizeMessage("Pod resize "+p.Reason, pod, pod.Generation, p.Message))
}
