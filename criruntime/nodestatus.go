package criruntime

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// SetNodeStatus sets the node's status.features and status.runtimeHandlers
// from the runtime's CRI Status, as upstream's NodeFeatures and
// RuntimeHandlers setters: features.supplementalGroupsPolicy is the
// runtime's supplemental_groups_policy feature (left unset when the runtime
// reports no features, as containerd 1.6), and each handler carries its
// recursiveReadOnlyMounts and userNamespaces support. It satisfies
// statusmgr.StatusSetter. It makes one CRI call; when that fails the node
// keeps what the last successful call set, and the error is returned.
func (r *Runtime) SetNodeStatus(ctx context.Context, node *v1.Node) error {
	st, err := r.rs.Status(ctx, false)
	r.nodeMu.Lock()
	defer r.nodeMu.Unlock()
	if err == nil {
		r.nodeFeatures, r.nodeHandlers = nil, make([]v1.NodeRuntimeHandler, 0, len(st.GetRuntimeHandlers()))
		if f := st.GetFeatures(); f != nil {
			sgp := f.GetSupplementalGroupsPolicy()
			r.nodeFeatures = &v1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
		}
		for _, h := range st.GetRuntimeHandlers() {
			rro, un := h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()
			r.nodeHandlers = append(r.nodeHandlers, v1.NodeRuntimeHandler{
				Name: h.GetName(), Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &rro, UserNamespaces: &un},
			})
		}
		r.nodeKnown = true
	}
	if r.nodeKnown {
		node.Status.Features = r.nodeFeatures.DeepCopy()
		node.Status.RuntimeHandlers = make([]v1.NodeRuntimeHandler, len(r.nodeHandlers))
		for i := range r.nodeHandlers {
			r.nodeHandlers[i].DeepCopyInto(&node.Status.RuntimeHandlers[i])
		}
	}
	if err != nil {
		return fmt.Errorf("criruntime: status for node features: %w", err)
	}
	return nil
}

// SupportsRecursiveReadOnly reports whether the runtime handler (""
// the default) supports recursive read-only mounts, as upstream decides it
// from the runtime's last status: the handlers the last CRI Status call
// for the node status reported (one call now when none was made yet); a
// runtime that reports no handlers (containerd 1.6) supports none.
func (r *Runtime) SupportsRecursiveReadOnly(ctx context.Context, handler string) bool {
	r.nodeMu.Lock()
	known := r.nodeKnown
	r.nodeMu.Unlock()
	if !known {
		if err := r.SetNodeStatus(ctx, &v1.Node{}); err != nil {
			return false
		}
	}
	r.nodeMu.Lock()
	defer r.nodeMu.Unlock()
	for _, h := range r.nodeHandlers {
		if h.Name == handler {
			return h.Features != nil && h.Features.RecursiveReadOnlyMounts != nil && *h.Features.RecursiveReadOnlyMounts
		}
	}
	return false
}
