package kubeclient

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodekit/nodekit/events"
)

// listWatcher is the part of a Resource an informer needs.
type listWatcher[L any] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ListWatch lists and watches r for an informer or reflector, each
// request's options first passed to tweak (nil for none) — what
// client-go's generated informer constructors build over a clientset.
// client is what r came from (an Interface): a client that says it
// cannot stream lists (client-go's fake, through clientgo) is listed and
// watched; a Client streams them where the API server can.
func ListWatch[L runtime.Object](client any, r listWatcher[L], tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	opts := func(o metav1.ListOptions) metav1.ListOptions {
		if tweak != nil {
			tweak(&o)
		}
		return o
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, opts(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return r.Watch(ctx, opts(o))
		},
	}, client)
}

// EventSink is where an event recorder (an events.Broadcaster, or
// client-go's record.Broadcaster: the method sets are the same) writes:
// each event created, updated or patched in its own namespace.
// Requests run under ctx's values but are never cancelled with it, so the
// events of an agent's shutdown still reach the API server (client-go's
// own sink sends them with no deadline either).
func EventSink(ctx context.Context, c Interface) events.Sink {
	return eventSink{ctx: context.WithoutCancel(ctx), c: c}
}

type eventSink struct {
	ctx context.Context
	c   Interface
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.c.CoreV1().Events(e.Namespace).Create(s.ctx, e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.c.CoreV1().Events(e.Namespace).Update(s.ctx, e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.c.CoreV1().Events(e.Namespace).Patch(s.ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
