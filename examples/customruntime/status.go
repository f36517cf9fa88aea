package main

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// ListPods reports every pod with a ready sandbox or a running process
// (with all, every one the runtime remembers).
func (r *procRuntime) ListPods(_ context.Context, all bool) ([]*nodekit.Pod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*nodekit.Pod
	for uid, p := range r.pods {
		rp := &nodekit.Pod{ID: uid, Name: p.name, Namespace: p.namespace}
		for _, sb := range p.sandboxes {
			state := nodekit.StateExited
			if sb.State == nodekit.SandboxReady {
				state = nodekit.StateRunning
			}
			if all || state == nodekit.StateRunning {
				rp.Sandboxes = append(rp.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{Type: "proc", ID: sb.ID}, State: state, CreatedAt: sb.CreatedAt})
				rp.CreatedAt = sb.CreatedAt
			}
		}
		for _, pr := range p.procs {
			if all || pr.st.State == nodekit.StateRunning {
				rp.Containers = append(rp.Containers, &nodekit.Container{ID: pr.st.ID, Name: pr.st.Name,
					Image: pr.st.Image, ImageID: pr.st.ImageID, State: pr.st.State, CreatedAt: pr.st.CreatedAt})
			}
		}
		if len(rp.Sandboxes)+len(rp.Containers) > 0 {
			out = append(out, rp)
		}
	}
	return out, nil
}

// GetPodStatus reports the pod's sandbox and every process it ran.
func (r *procRuntime) GetPodStatus(_ context.Context, uid types.UID, name, namespace string) (*nodekit.PodStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &nodekit.PodStatus{ID: uid, Name: name, Namespace: namespace, TimeStamp: time.Now()}
	p := r.pods[uid]
	if p == nil {
		return st, nil
	}
	for _, sb := range p.sandboxes {
		c := *sb
		st.Sandboxes = append(st.Sandboxes, &c)
		st.IPs = sb.IPs
	}
	for _, pr := range p.procs {
		c := pr.st
		st.Containers = append(st.Containers, &c)
	}
	return st, nil
}
