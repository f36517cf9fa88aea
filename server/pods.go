package server

import (
	"context"
	"encoding/json"
	"net/http"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// PodLister lists the pods the agent was told to run (from every source,
// terminated ones included until they are removed), for /pods and for
// finding the pod of a logs, exec, attach or port-forward request.
type PodLister interface {
	// GetPods returns the pods. It must not block; the pods are shared
	// and must not be modified.
	GetPods() []*v1.Pod
}

// PodListerFunc adapts a function to PodLister.
type PodListerFunc func() []*v1.Pod

// GetPods calls f.
func (f PodListerFunc) GetPods() []*v1.Pod { return f() }

// RuntimePods is what the server reads from the container runtime:
// nodekit.Runtime (criruntime.Runtime) satisfies it.
type RuntimePods interface {
	// ListPods lists the runtime's pods; with all=false only running
	// containers and ready sandboxes.
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
	PodStatusGetter
}

// findPod returns the agent's pod namespace/name, preferring a pod over
// its mirror.
func (s *Server) findPod(namespace, name string) (*v1.Pod, bool) {
	if s.cfg.Pods == nil {
		return nil, false
	}
	var found *v1.Pod
	for _, p := range s.cfg.Pods.GetPods() {
		if p.Namespace != namespace || p.Name != name {
			continue
		}
		if !podutil.IsMirror(p) {
			return p, true
		}
		found = p
	}
	return found, found != nil
}

// podMatchesUID reports whether a request's pod UID (empty: any) names
// pod or its mirror.
func podMatchesUID(pod *v1.Pod, uid types.UID) bool {
	if uid == "" || pod.UID == uid {
		return true
	}
	a := pod.Annotations
	return a[podutil.ConfigMirrorAnnotation] == string(uid) || a[podutil.ConfigHashAnnotation] == string(uid)
}

// writeJSON writes v as a 200 JSON response.
func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Unable to encode a response", "path", r.URL.Path)
		http.Error(w, "unable to encode the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func podList(pods []*v1.Pod) *v1.PodList {
	list := &v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []v1.Pod{}}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	return list
}

// pods serves GET /pods: the agent's pods as a v1 PodList.
func (s *Server) pods(w http.ResponseWriter, r *http.Request) {
	var pods []*v1.Pod
	if s.cfg.Pods != nil {
		pods = s.cfg.Pods.GetPods()
	}
	writeJSON(w, r, podList(pods))
}

// runningPods serves GET /runningpods/: the pods the runtime runs, with
// only what the runtime knows (name, namespace, UID, container names and
// images).
func (s *Server) runningPods(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Runtime == nil {
		http.Error(w, "running pods are not available: the node agent serves no runtime", http.StatusServiceUnavailable)
		return
	}
	running, err := s.cfg.Runtime.ListPods(r.Context(), false)
	if err != nil {
		http.Error(w, "unable to list running pods: "+err.Error(), http.StatusInternalServerError)
		return
	}
	pods := make([]*v1.Pod, 0, len(running))
	for _, rp := range running {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rp.Name, Namespace: rp.Namespace, UID: rp.ID}}
		for _, c := range rp.Containers {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c.Name, Image: c.Image})
		}
		pods = append(pods, p)
	}
	writeJSON(w, r, podList(pods))
}
