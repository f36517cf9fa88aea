package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Checkpointer checkpoints a running container (CRI CheckpointContainer)
// into an archive at req.Location. It blocks until the runtime is done.
type Checkpointer interface {
	CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error
}

// checkpoint serves POST /checkpoint/{namespace}/{pod}/{container}
// [?timeout=SECONDS] with {"items":["ARCHIVE"]}.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	pod, ok := s.findPod(ns, name)
	if !ok {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	if !hasContainer(pod, container) {
		http.Error(w, fmt.Sprintf("container %v does not exist", container), http.StatusNotFound)
		return
	}
	req := &runtimeapi.CheckpointContainerRequest{Location: s.checkpointLocation(ns, name, container)}
	if ts := r.URL.Query()["timeout"]; len(ts) > 0 {
		t, err := strconv.ParseInt(ts[len(ts)-1], 10, 64)
		if err != nil {
			http.Error(w, "cannot parse value of timeout parameter", http.StatusBadRequest)
			return
		}
		req.Timeout = t
	}
	if s.cfg.Runtime == nil {
		http.Error(w, "checkpoints are not available: the node agent serves no runtime", http.StatusServiceUnavailable)
		return
	}
	running, err := s.cfg.Runtime.ListPods(r.Context(), false)
	if err != nil {
		http.Error(w, "unable to list running pods: "+err.Error(), http.StatusInternalServerError)
		return
	}
	for _, rp := range running {
		if rp.ID != pod.UID {
			continue
		}
		id, err := runningContainer(rp, name, container)
		if err != nil {
			writeError(w, err)
			return
		}
		req.ContainerId = id
	}
	if req.ContainerId == "" {
		http.Error(w, fmt.Sprintf("container %v is not running", container), http.StatusNotFound)
		return
	}
	if err := s.cfg.Checkpointer.CheckpointContainer(r.Context(), req); err != nil {
		http.Error(w, fmt.Sprintf("checkpointing of %s/%s/%s failed (%v)", ns, name, container, err), http.StatusInternalServerError)
		return
	}
	writeJSON(w, r, map[string][]string{"items": {req.Location}})
}
