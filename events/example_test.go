package events_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/events"
)

// Both sides can be swapped for client-go's.
var (
	_ record.EventRecorder = (*events.Recorder)(nil)
	_ record.EventSink     = events.Sink(nil)
	_ events.Sink          = record.EventSink(nil)
)

// printSink prints what it is asked to write and says when it wrote.
type printSink struct{ written chan struct{} }

func (s printSink) Create(e *v1.Event) (*v1.Event, error) {
	fmt.Printf("create %s/%s: %s %s %q (count %d)\n", e.Namespace, e.Name, e.Type, e.Reason, e.Message, e.Count)
	s.written <- struct{}{}
	return e, nil
}

func (s printSink) Update(e *v1.Event) (*v1.Event, error) { return e, nil }

func (s printSink) Patch(e *v1.Event, patch []byte) (*v1.Event, error) {
	fmt.Printf("patch %s/%s: %s\n", e.Namespace, e.Name, patch)
	s.written <- struct{}{}
	return e, nil
}

func Example() {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	sink := printSink{written: make(chan struct{})}

	b := events.NewBroadcaster(ctx, sink, events.WithClock(clock))
	defer b.Shutdown()
	recorder := b.NewRecorder(scheme, v1.EventSource{Component: "kubelet", Host: "node-1"})

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "1234"}}
	recorder.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s", "app")
	<-sink.written
	clock.Step(time.Minute)
	recorder.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s", "app")
	<-sink.written

	// Output:
	// create shop/web-0.1886caf21c963200: Warning BackOff "Back-off restarting failed container app" (count 1)
	// patch shop/web-0.1886caf21c963200: {"count":2,"lastTimestamp":"2026-01-02T03:05:05Z","message":"Back-off restarting failed container app"}
}
