package gc

import (
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// instrumentationScope names the tracer of the garbage collectors' spans.
const instrumentationScope = "github.com/nodekit/nodekit/gc"

// Upstream kubelet's span names of one garbage collection pass
// (pkg/kubelet/kuberuntime/kuberuntime_gc.go and
// pkg/kubelet/images/image_gc_manager.go).
const (
	containerGCSpan = "Containers/GarbageCollect"
	imageGCSpan     = "Images/GarbageCollect"
)

// tracerOf is tp's tracer for this package; a no-op one when tp is nil.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(instrumentationScope)
}
