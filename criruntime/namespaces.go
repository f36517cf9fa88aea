package criruntime

import (
	"context"
	"fmt"
	"math"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/criruntime/userns"
	"github.com/nodekit/nodekit/internal/poddir"
)

// usernsState creates the user namespace allocator on first use, so a node
// that never runs a pod with hostUsers: false never reads the pod
// directories for it. Creating it reads every checkpoint, so a restarted
// agent knows the ranges of running pods before it hands one out.
type usernsState struct {
	mu    sync.Mutex
	cfg   userns.Config
	alloc *userns.Allocator
}

func (s *usernsState) get() (*userns.Allocator, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.alloc == nil {
		a, err := userns.New(s.cfg)
		if err != nil {
			return nil, err
		}
		s.alloc = a
	}
	return s.alloc, nil
}

// podNamespaces is the pod's namespaces as upstream sets them on the
// sandbox and on every container: network, IPC and PID from the spec, and
// the user namespace: the node's unless spec.hostUsers is false, then a
// namespace of the pod's own mapped onto the pod's ID range, which the
// runtime handler must support.
func (r *Runtime) podNamespaces(ctx context.Context, pod *v1.Pod, handler string) (*runtimeapi.NamespaceOption, error) {
	ns := &runtimeapi.NamespaceOption{
		Network:       runtimeapi.NamespaceMode_POD,
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		Ipc:           runtimeapi.NamespaceMode_POD,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE},
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return ns, nil
	}
	if err := r.handlerSupportsUserns(ctx, handler); err != nil {
		return nil, err
	}
	alloc, err := r.userns.get()
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	m, err := alloc.Get(pod.UID)
	if err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	ids := []*runtimeapi.IDMapping{{HostId: m.HostID, ContainerId: 0, Length: m.Length}}
	ns.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}
	return ns, nil
}

// handlerSupportsUserns asks the runtime whether the handler supports user
// namespaces (CRI Status, runtime_handlers[].features.user_namespaces) and
// fails with upstream's message when it does not. A runtime that reports
// no handlers at all (containerd 1.6) supports none.
func (r *Runtime) handlerSupportsUserns(ctx context.Context, handler string) error {
	msg := "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if handler != "" {
		msg = fmt.Sprintf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", handler)
	}
	st, err := r.rs.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	handlers := st.GetRuntimeHandlers()
	if len(handlers) == 0 {
		return fmt.Errorf("%s", msg)
	}
	for _, h := range handlers {
		if h.GetName() == handler {
			if !h.GetFeatures().GetUserNamespaces() {
				return fmt.Errorf("%s", msg)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: the handler %q is not known", msg, handler)
}

func usernsConfig(cfg Config) userns.Config {
	return userns.Config{PodsDir: poddir.Pods(cfg.RootDir), IDsPerPod: uint32(cfg.UserNamespaceIDsPerPod), // checked by validIDsPerPod
		FirstID: cfg.UserNamespaceFirstID, Length: cfg.UserNamespaceLength, MaxPods: cfg.UserNamespaceMaxPods}
}

// validIDsPerPod checks Config.UserNamespaceIDsPerPod with upstream's
// rules and words.
func validIDsPerPod(n int64) error {
	switch {
	case n == 0:
		return nil
	case n < userns.DefaultIDsPerPod:
		return fmt.Errorf("criruntime: userNamespaces.idsPerPod must not be less than %d", userns.DefaultIDsPerPod)
	case n%userns.DefaultIDsPerPod != 0:
		return fmt.Errorf("criruntime: userNamespaces.idsPerPod must be a multiple of %d", userns.DefaultIDsPerPod)
	case n > math.MaxUint32:
		return fmt.Errorf("criruntime: userNamespaces.idsPerPod must not be more than %d", int64(math.MaxUint32))
	}
	return nil
}
