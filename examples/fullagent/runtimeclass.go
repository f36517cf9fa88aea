package main

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	nodev1listers "k8s.io/client-go/listers/node/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/criruntime"
)

// runtimeClasses resolves spec.runtimeClassName to the CRI runtime handler
// through a RuntimeClass informer, as upstream's runtime class manager. A
// pod keeps the handler it was first resolved with, so deleting its
// RuntimeClass does not stop a running pod from being synced (only a new
// sandbox needs the class). Nil lister (standalone): the class is ignored
// and the runtime's default handler used, as upstream.
type runtimeClasses struct {
	lister nodev1listers.RuntimeClassLister

	mu      sync.Mutex
	handler map[types.UID]string
}

// handlerFor returns the pod's runtime handler, "" for the default.
func (r *runtimeClasses) handlerFor(pod *v1.Pod) (string, error) {
	name := pod.Spec.RuntimeClassName
	if r == nil || r.lister == nil || name == nil || *name == "" {
		return "", nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, err := r.lister.Get(*name)
	if err != nil {
		if h, ok := r.handler[pod.UID]; ok {
			return h, nil
		}
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("RuntimeClass %q not found", *name)
		}
		return "", fmt.Errorf("RuntimeClass %q: %w", *name, err)
	}
	if r.handler == nil {
		r.handler = map[types.UID]string{}
	}
	r.handler[pod.UID] = rc.Handler
	return rc.Handler, nil
}

// forget drops the handlers of pods not in keep.
func (r *runtimeClasses) forget(keep map[types.UID]bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid := range r.handler {
		if !keep[uid] {
			delete(r.handler, uid)
		}
	}
}

// sandbox sets the runtime handler in the pod's sandbox options.
func (r *runtimeClasses) sandbox(next func(context.Context, *v1.Pod) (nodekit.SandboxOptions, error)) func(context.Context, *v1.Pod) (nodekit.SandboxOptions, error) {
	return func(ctx context.Context, pod *v1.Pod) (nodekit.SandboxOptions, error) {
		o, err := next(ctx, pod)
		if err != nil {
			return o, err
		}
		if o.RuntimeHandler, err = r.handlerFor(pod); err != nil {
			return o, err
		}
		return o, nil
	}
}

// rroSupport tells volumemgr and the loop whether a pod's runtime handler
// supports recursive read-only mounts, from the runtime's handlers as the
// node status reports them (upstream's runtimeClassSupportsRecursiveReadOnlyMounts).
type rroSupport struct {
	runtime *criruntime.Runtime
	classes *runtimeClasses
}

func (s rroSupport) SupportsRecursiveReadOnly(ctx context.Context, pod *v1.Pod) bool {
	handler, err := s.classes.handlerFor(pod)
	if err != nil {
		return false
	}
	return s.runtime.SupportsRecursiveReadOnly(ctx, handler)
}
