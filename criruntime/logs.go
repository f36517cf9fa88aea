package criruntime

import (
	"context"
	"fmt"
	"maps"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
)

// RunningContainerLogs returns the log file of every running container, by
// CRI container ID (the ID without the runtime scheme), for log rotation.
// Containers that stop or vanish while being listed are left out. A
// container's log path is fixed when it is created, so the runtime is
// asked for a container's status (which carries the path; the listing
// does not) once, when the container is first listed; the paths of
// containers no longer running are forgotten. Upstream asks for every
// running container's status on every call: at 1000 containers and a call
// every 10 s, a thousand status calls to learn nothing new.
func (r *Runtime) RunningContainerLogs(ctx context.Context) (map[string]string, error) {
	running := &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
	cs, err := r.rs.ListContainers(ctx, running)
	if err != nil {
		return nil, fmt.Errorf("criruntime: list running containers: %w", err)
	}
	r.logMu.Lock()
	known := r.logPaths
	r.logMu.Unlock()
	out := make(map[string]string, len(cs))
	for _, c := range cs {
		if p, ok := known[c.GetId()]; ok {
			out[c.GetId()] = p
			continue
		}
		// ListContainers does not carry the log path; the status does.
		st, err := r.rs.ContainerStatus(ctx, c.GetId(), false)
		if crierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("criruntime: status of container %s: %w", c.GetId(), err)
		}
		s := st.GetStatus()
		if s.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || s.GetLogPath() == "" {
			continue
		}
		out[c.GetId()] = s.GetLogPath()
	}
	r.logMu.Lock()
	r.logPaths = out
	r.logMu.Unlock()
	return maps.Clone(out), nil
}

// ReopenContainerLog asks the runtime to close the container's log file
// and open its log path afresh, as it must after the file was renamed.
func (r *Runtime) ReopenContainerLog(ctx context.Context, containerID string) error {
	if err := r.rs.ReopenContainerLog(ctx, containerID); err != nil {
		return fmt.Errorf("criruntime: reopen log of container %s: %w", containerID, err)
	}
	return nil
}
