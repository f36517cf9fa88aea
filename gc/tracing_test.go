package gc

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// spanRemover records the span each removal ran under.
type spanRemover struct {
	fakeRuntime
	images fakeImages
	under  []trace.SpanID
}

func (r *spanRemover) RemoveContainer(ctx context.Context, id nodekit.ContainerID) error {
	r.under = append(r.under, trace.SpanContextFromContext(ctx).SpanID())
	return r.fakeRuntime.RemoveContainer(ctx, id)
}

func (r *spanRemover) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	return r.images.ListImages(ctx)
}

func (r *spanRemover) RemoveImage(ctx context.Context, id string) error {
	r.under = append(r.under, trace.SpanContextFromContext(ctx).SpanID())
	return r.images.RemoveImage(ctx, id)
}

// ended is the names of the ended spans, and the span ID of the last.
func ended(rec *tracetest.SpanRecorder) ([]string, trace.SpanID) {
	var names []string
	var last trace.SpanID
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
		last = s.SpanContext().SpanID()
	}
	return names, last
}

// With a TracerProvider, each container GC pass (the periodic one and
// the eviction manager's Reclaim) is one span named as upstream's,
// Containers/GarbageCollect, with the runtime's removals under it.
func TestContainerGCSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rt := &spanRemover{fakeRuntime: fakeRuntime{pods: []*nodekit.Pod{{ID: "g", Containers: []*nodekit.Container{
		ctr("g-dead", "app", nodekit.StateExited, time.Hour)}}}}}
	g, err := NewContainerGC(ContainerGCConfig{Policy: ContainerPolicy{MaxContainers: -1}, Clock: clocktesting.NewFakeClock(t0),
		TracerProvider: tp}, rt, podStates{content: map[types.UID]bool{"g": true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.GarbageCollect(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	names, id := ended(rec)
	if len(names) != 1 || names[0] != "Containers/GarbageCollect" {
		t.Fatalf("spans %q, want one Containers/GarbageCollect", names)
	}
	if len(rt.under) != 1 || rt.under[0] != id {
		t.Errorf("removal ran under %v, want the pass's span %v", rt.under, id)
	}
	if err := g.Reclaim(t.Context()); err != nil {
		t.Fatal(err)
	}
	if names, _ := ended(rec); len(names) != 2 || names[1] != "Containers/GarbageCollect" {
		t.Errorf("spans after Reclaim %q, want a second Containers/GarbageCollect", names)
	}
}

// With a TracerProvider, each image GC pass is one span named as
// upstream's, Images/GarbageCollect, with the removals under it;
// Reclaim, upstream's DeleteUnusedImages, has none.
func TestImageGCSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	clk := clocktesting.NewFakeClock(t0)
	rt := &spanRemover{images: fakeImages{images: []*runtimeapi.Image{{Id: "sha256:old", Size: 200}, {Id: "sha256:older", Size: 300}}}}
	g, err := NewImageGC(ImageGCConfig{Policy: ImagePolicy{MaxAge: time.Minute}, Clock: clk, TracerProvider: tp}, rt, fakePods{}, fakeFs{1000, 900})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Minute)
	if err := g.GarbageCollect(t.Context()); err != nil {
		t.Fatal(err)
	}
	names, id := ended(rec)
	if len(names) != 1 || names[0] != "Images/GarbageCollect" {
		t.Fatalf("spans %q, want one Images/GarbageCollect", names)
	}
	if len(rt.under) != 2 || rt.under[0] != id || rt.under[1] != id {
		t.Errorf("removals ran under %v, want the pass's span %v", rt.under, id)
	}
	rt.images.images = []*runtimeapi.Image{{Id: "sha256:young", Size: 1}}
	if err := g.Reclaim(t.Context()); err != nil {
		t.Fatal(err)
	}
	if names, _ := ended(rec); len(names) != 1 {
		t.Errorf("spans after Reclaim %q, want none added (upstream's DeleteUnusedImages has no span)", names)
	}
}
