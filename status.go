package nodekit

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// StatusSink receives the pod statuses the status manager decided to publish.
// The API-server sink patches pods/status; a vendor sink may write JSON lines,
// publish to MQTT, or keep them in memory.
type StatusSink interface {
	// SetPodStatus publishes status for pod. It blocks until the sink has
	// accepted or refused the write; the caller retries a failed write later
	// with the newest status, so a sink need not queue. It must be idempotent:
	// the same status may be sent twice. pod and status are the caller's and
	// must not be modified or retained after return.
	SetPodStatus(ctx context.Context, pod *v1.Pod, status *v1.PodStatus) error

	// DeletePod tells the sink that the pod has terminated and its resources
	// are released, so the sink may drop it (the API-server sink deletes the
	// object with grace period 0, with the pod's UID as precondition). Called
	// at most once per pod unless an earlier call failed; a missing pod is not
	// an error.
	DeletePod(ctx context.Context, pod *v1.Pod) error
}

// Decision is the outcome of admission. A rejection is a value, not an error:
// Reason is a short CamelCase word that ends up in the pod's status.reason
// (OutOfcpu, NodeAffinity, ...) and Message a sentence for humans.
type Decision struct {
	Admit   bool
	Reason  string
	Message string
}

// Admitted is the decision to admit.
var Admitted = Decision{Admit: true}

// AdmitRequest is what an Admitter sees: the pod asking to run and the pods
// already admitted on this node. Both are read-only.
type AdmitRequest struct {
	Pod  *v1.Pod
	Pods []*v1.Pod
}

// Admitter decides whether a pod may run on this node. Admitters run in order
// when a pod is added; the first rejection wins.
type Admitter interface {
	// Admit must not block on I/O beyond local state and must be safe to
	// call from one goroutine at a time per chain. It must not modify the
	// request's pods.
	Admit(ctx context.Context, req AdmitRequest) Decision
}

// AdmitFunc adapts a function to Admitter.
type AdmitFunc func(ctx context.Context, req AdmitRequest) Decision

// Admit implements Admitter.
func (f AdmitFunc) Admit(ctx context.Context, req AdmitRequest) Decision { return f(ctx, req) }

var _ Admitter = AdmitFunc(nil)
