package criruntime

import (
	"context"
	"fmt"
	"net/url"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec asks the runtime's streaming server to prepare an exec session in a
// container and returns the URL that serves it (one use, short-lived). It
// blocks only for the CRI call; the session itself runs when a client
// connects to the URL (kubelet API servers proxy the caller's upgraded
// connection there). The request is not modified.
func (r *Runtime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*url.URL, error) {
	resp, err := r.rs.Exec(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("criruntime: exec in container %s: %w", req.GetContainerId(), err)
	}
	return parseStreamURL("exec", resp.GetUrl())
}

// Attach is Exec for attaching to a container's main process.
func (r *Runtime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*url.URL, error) {
	resp, err := r.rs.Attach(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("criruntime: attach to container %s: %w", req.GetContainerId(), err)
	}
	return parseStreamURL("attach", resp.GetUrl())
}

// PortForward is Exec for forwarding ports into a pod sandbox's network
// namespace. With SPDY the ports are chosen per stream, so req.Port may be
// empty.
func (r *Runtime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*url.URL, error) {
	resp, err := r.rs.PortForward(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("criruntime: port-forward to sandbox %s: %w", req.GetPodSandboxId(), err)
	}
	return parseStreamURL("port-forward", resp.GetUrl())
}

func parseStreamURL(what, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("criruntime: %s: the runtime returned no streaming URL", what)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("criruntime: %s: runtime returned an invalid streaming URL %q: %w", what, raw, err)
	}
	if u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("criruntime: %s: runtime returned a streaming URL %q without scheme or host", what, raw)
	}
	return u, nil
}
