package podconfig

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/kubeclient"
)

// APISource is the API server as a pod source: the pods bound to one node
// (spec.nodeName), kept by a field-selected list+watch (a client-go
// reflector). It sends a full SET of the node's pods after the first list
// and after every re-list, and for each watch event in between an ADD,
// UPDATE (a newer resourceVersion of a pod it sent) or REMOVE (a pod gone)
// of that one pod, so an event costs the same whatever the number of pods.
// While the API server is unreachable the reflector retries with back-off
// and nothing is sent, so the last pods stay in force; the re-list that
// follows an outage is a SET, so pods deleted meanwhile are removed.
type APISource struct {
	client   kubeclient.Interface
	nodeName string
	o        sourceOptions

	// backoff, if set, replaces the reflector's retry back-off (tests).
	backoff *wait.Backoff
}

var _ nodekit.Source = (*APISource)(nil)

// NewAPISource returns a source of the pods bound to nodeName, read with
// client (which should carry the node's own credentials). Options:
// WithErrorHandler (list and watch failures), WithSourceName.
func NewAPISource(client kubeclient.Interface, nodeName string, opts ...SourceOption) *APISource {
	return &APISource{client: client, nodeName: nodeName, o: buildSourceOptions(nodekit.SourceAPI, opts)}
}

// Name implements nodekit.Source ("api" unless WithSourceName).
func (s *APISource) Name() string { return s.o.name }

// Run implements nodekit.Source: it lists and watches until ctx is done.
// The pods sent are the objects decoded from the API server's answers,
// which the receiver owns; a SET is sorted by namespace/name.
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
// into updates on out (see apiStore).
func (s *APISource) newStore(ctx context.Context, out chan<- nodekit.PodUpdate) cache.ReflectorStore {
	return &apiStore{ctx: ctx, out: out, source: s.Name(), nodeName: s.nodeName, known: map[types.UID]string{}}
}

// apiStore is the API source's reflector store. It keeps no pods, only the
// resourceVersion of each pod it has sent, and turns the reflector's calls
// into updates:
//
//	Replace (a list: the first, or a re-list)  SET of the listed pods
//	Add, Update (a watch event)                ADD of a pod it has not sent,
//	                                           UPDATE of one whose
//	                                           resourceVersion moved on
//	Delete (a watch event)                     REMOVE of a pod it has sent
//
// so that a watch event costs O(1) however many pods the node has, and a
// re-list after a watch outage still removes the pods deleted meanwhile.
// An event whose resourceVersion equals the one sent, or is older than it
// (both well-formed, compared as the API server's integers), is dropped.
// The objects the reflector hands in were decoded for it alone; they are
// sent as they are (not copied, their managedFields dropped) and not
// touched again: the receiver owns them. The reflector calls the store from one goroutine.
type apiStore struct {
	ctx      context.Context
	out      chan<- nodekit.PodUpdate
	source   string
	nodeName string
	known    map[types.UID]string // pod UID -> the resourceVersion last sent
}

var _ cache.ReflectorStore = (*apiStore)(nil)

// pod returns obj as a pod of this node, or nil.
func (s *apiStore) pod(obj any) *v1.Pod {
	pod, ok := obj.(*v1.Pod)
	// The field selector does this on a real API server; a fake client may
	// not.
	if !ok || pod == nil || pod.Spec.NodeName != s.nodeName || pod.UID == "" {
		return nil
	}
	// Nothing on the node reads managedFields; they are a fifth of a
	// typical pod's memory, kept in every copy down the pipeline.
	pod.ManagedFields = nil
	return pod
}

func (s *apiStore) send(op nodekit.Op, pods ...*v1.Pod) {
	select {
	case s.out <- nodekit.PodUpdate{Op: op, Pods: pods, Source: s.source}:
	case <-s.ctx.Done():
	}
}

// Add implements cache.ReflectorStore: a watch event.
func (s *apiStore) Add(obj any) error { return s.changed(obj) }

// Update implements cache.ReflectorStore: a watch event.
func (s *apiStore) Update(obj any) error { return s.changed(obj) }

func (s *apiStore) changed(obj any) error {
	pod := s.pod(obj)
	if pod == nil {
		return nil
	}
	rv := pod.ResourceVersion
	sent, known := s.known[pod.UID]
	if known && !newerVersion(rv, sent) {
		klog.FromContext(s.ctx).V(5).Info("Dropping a pod event that is not newer than the one sent", "pod", klog.KObj(pod), "podUID", pod.UID, "resourceVersion", rv, "sent", sent)
		return nil
	}
	s.known[pod.UID] = rv
	if known {
		s.send(nodekit.UPDATE, pod)
	} else {
		s.send(nodekit.ADD, pod)
	}
	return nil
}

// Delete implements cache.ReflectorStore: a watch event of a pod gone from
// the API server (or from the node).
func (s *apiStore) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod := s.pod(obj)
	if pod == nil {
		return nil
	}
	if _, known := s.known[pod.UID]; !known {
		return nil
	}
	delete(s.known, pod.UID)
	s.send(nodekit.REMOVE, pod)
	return nil
}

// Replace implements cache.ReflectorStore: a list, the first or a re-list
// (after a watch could not be resumed), sent as a SET sorted by
// namespace/name.
func (s *apiStore) Replace(objs []any, _ string) error {
	set := make([]*v1.Pod, 0, len(objs))
	known := make(map[types.UID]string, len(objs))
	for _, o := range objs {
		if pod := s.pod(o); pod != nil {
			set = append(set, pod)
			known[pod.UID] = pod.ResourceVersion
		}
	}
	sortPods(set)
	s.known = known
	s.send(nodekit.SET, set...)
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (s *apiStore) Resync() error { return nil }

// newerVersion reports whether resourceVersion rv is a change from sent:
// different, and not older when both are well-formed integers (opaque ones
// that differ count as newer).
func newerVersion(rv, sent string) bool {
	if rv == sent && rv != "" {
		return false
	}
	if c, err := resourceversion.CompareResourceVersion(rv, sent); err == nil {
		return c > 0
	}
	return true
}
