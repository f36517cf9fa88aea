package podconfig

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// APISource is the API server as a pod source: the pods bound to one node
// (spec.nodeName), kept by a field-selected list+watch (a client-go
// reflector). It sends a full SET of the node's pods after the first list
// and after every change; while the API server is unreachable the reflector
// retries with back-off and nothing is sent, so the last set stays in force.
type APISource struct {
	client   kubernetes.Interface
	nodeName string
	o        sourceOptions

	// backoff, if set, replaces the reflector's retry back-off (tests).
	backoff *wait.Backoff
}

var _ nodekit.Source = (*APISource)(nil)

// NewAPISource returns a source of the pods bound to nodeName, read with
// client (which should carry the node's own credentials). Options:
// WithErrorHandler (list and watch failures), WithSourceName.
func NewAPISource(client kubernetes.Interface, nodeName string, opts ...SourceOption) *APISource {
	return &APISource{client: client, nodeName: nodeName, o: buildSourceOptions(nodekit.SourceAPI, opts)}
}

// Name implements nodekit.Source ("api" unless WithSourceName).
func (s *APISource) Name() string { return s.o.name }

// Run implements nodekit.Source: it lists and watches until ctx is done.
// Each SET holds copies the receiver owns, sorted by namespace/name.
func (s *APISource) Run(ctx context.Context, out chan<- nodekit.PodUpdate) error {
	if s.nodeName == "" {
		return errors.New("podconfig: api source: node name is empty")
	}
	if s.client == nil {
		return errors.New("podconfig: api source: client is nil")
	}
	logger := klog.FromContext(ctx)
	rep := newReporter(s.o.onError)
	selector := fields.OneTermEqualSelector("spec.nodeName", s.nodeName).String()
	pods := s.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := pods.List(ctx, opts)
			if err != nil && ctx.Err() == nil {
				rep.report(ctx, "list", fmt.Errorf("list pods of node %s: %w", s.nodeName, err))
			} else if err == nil && rep.clear("list") {
				logger.Info("Listing pods works again")
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := pods.Watch(ctx, opts)
			if err != nil && ctx.Err() == nil {
				rep.report(ctx, "watch", fmt.Errorf("watch pods of node %s: %w", s.nodeName, err))
			} else if err == nil {
				rep.clear("watch")
			}
			return w, err
		},
	}
	store := s.newStore(ctx, out)
	// A fake clientset cannot stream a watch-list; the wrapper lets the
	// reflector know and list instead.
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, s.client), &v1.Pod{}, store, cache.ReflectorOptions{
		Name:    "podconfig api source",
		Logger:  &logger,
		Backoff: s.backoff,
	})
	r.RunWithContext(ctx)
	return ctx.Err()
}

// newStore returns the reflector's store, which turns the reflector's calls
// into updates on out.
func (s *APISource) newStore(ctx context.Context, out chan<- nodekit.PodUpdate) cache.ReflectorStore {
	push := func(objs []any) {
		set := make([]*v1.Pod, 0, len(objs))
		for _, o := range objs {
			pod, ok := o.(*v1.Pod)
			// The field selector does this on a real API server; a fake
			// client may not.
			if !ok || pod.Spec.NodeName != s.nodeName {
				continue
			}
			set = append(set, pod.DeepCopy())
		}
		sortPods(set)
		select {
		case out <- nodekit.PodUpdate{Op: nodekit.SET, Pods: set, Source: s.Name()}:
		case <-ctx.Done():
		}
	}
	return cache.NewUndeltaStore(push, cache.MetaNamespaceKeyFunc)
}
