package syncloop

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
)

// instrumentationScope names the tracer of the pod workers' spans.
const instrumentationScope = "github.com/nodekit/nodekit/syncloop"

// Span attribute keys of a pod step, as upstream kubelet's (the
// OpenTelemetry semantic conventions' k8s.* keys, and kubelet's own
// k8s.pod and k8s.pod.update_type).
const (
	attrPodUID     = "k8s.pod.uid"
	attrPodName    = "k8s.pod.name"
	attrNamespace  = "k8s.namespace.name"
	attrPod        = "k8s.pod"
	attrUpdateType = "k8s.pod.update_type"
)

// stepSpanName is upstream's span name of a pod worker phase.
func stepSpanName(phase workerPhase) string {
	switch phase {
	case phaseTerminating:
		return "syncTerminatingPod"
	case phaseTerminated:
		return "syncTerminatedPod"
	}
	return "syncPod"
}

// startStepSpan opens the span of one pod worker step. syncPod carries
// the update's type ("create", "update", "sync", "kill") as upstream's.
func startStepSpan(ctx context.Context, tracer trace.Tracer, phase workerPhase, t UpdateType, pod *v1.Pod) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String(attrPodUID, string(pod.UID)),
		attribute.String(attrPod, pod.Namespace+"/"+pod.Name),
		attribute.String(attrPodName, pod.Name),
		attribute.String(attrNamespace, pod.Namespace),
	}
	if phase == phaseSyncing {
		attrs = append(attrs, attribute.String(attrUpdateType, operationType(phase, t)))
	}
	return tracer.Start(ctx, stepSpanName(phase), trace.WithAttributes(attrs...))
}

// endStepSpan ends a step's span, recording the step's error.
func endStepSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
