package criruntime

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// unlimited is what the OCI runtime reads as "no limit" for a CFS quota
// and a memory limit (runc writes it as -1 on cgroup v1, max on v2).
const unlimited = -1

// resizeResources maps a container's requests and limits to the CRI
// resources of an in-place resize: CPU shares from the request, CFS quota
// and period from the limit, the memory limit. A limit absent from r is
// sent as unlimited, so a removed limit is lifted (the runtime keeps a
// field left at zero). With noQuota (cpuCFSQuota: false) neither the
// quota nor the period is sent. The cpuset and the OOM score are left
// alone.
func resizeResources(r v1.ResourceRequirements, noQuota bool) *runtimeapi.LinuxContainerResources {
	req := r.Requests.Cpu().MilliValue()
	lim := r.Limits.Cpu().MilliValue()
	if req == 0 && lim != 0 {
		req = lim // as at creation
	}
	res := &runtimeapi.LinuxContainerResources{CpuShares: milliCPUToShares(req), CpuPeriod: quotaPeriodUs, CpuQuota: unlimited}
	if lim != 0 {
		res.CpuQuota = milliCPUToQuota(lim)
	}
	if noQuota {
		res.CpuPeriod, res.CpuQuota = 0, 0
	}
	res.MemoryLimitInBytes = unlimited
	if m := r.Limits.Memory().Value(); m != 0 {
		res.MemoryLimitInBytes = m
	}
	return res
}

// ResizeContainer applies r to a running container in place, through CRI
// UpdateContainerResources (allocation.ContainerUpdater).
func (r *Runtime) ResizeContainer(ctx context.Context, id nodekit.ContainerID, res v1.ResourceRequirements) error {
	if err := r.rs.UpdateContainerResources(ctx, id.ID, &runtimeapi.ContainerResources{Linux: resizeResources(res, r.cfg.DisableCPUCFSQuota)}); err != nil {
		return fmt.Errorf("criruntime: update resources of %s: %w", id, err)
	}
	return nil
}

// ContainerMemoryUsage returns the memory usage the runtime reports for
// a container (its cgroup's usage), for the check before a memory limit
// is lowered (allocation.MemoryUsage).
func (r *Runtime) ContainerMemoryUsage(ctx context.Context, id nodekit.ContainerID) (uint64, error) {
	st, err := r.rs.ContainerStats(ctx, id.ID)
	if err != nil {
		return 0, fmt.Errorf("criruntime: stats of %s: %w", id, err)
	}
	if st.GetMemory().GetUsageBytes() == nil {
		return 0, fmt.Errorf("criruntime: the runtime reports no memory usage of %s", id)
	}
	return st.GetMemory().GetUsageBytes().GetValue(), nil
}

// UpdatePodSandboxResources tells the runtime a pod's resources when its
// pod cgroup is resized (CRI UpdatePodSandboxResources;
// allocation.SandboxUpdater), as upstream: r the pod's totals without
// overhead, the overhead apart (its CPU and memory as both request and
// limit, as upstream treats overhead). The call is best-effort where the
// runtime lacks it: Unimplemented (containerd 1.6, 2.0) and Unknown "not
// implemented" (containerd 2.2) are logged and not an error, as upstream;
// any other error is.
func (r *Runtime) UpdatePodSandboxResources(ctx context.Context, sandboxID string, res v1.ResourceRequirements, overhead v1.ResourceList) error {
	req := &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: sandboxID,
		Resources: resizeResources(res, r.cfg.DisableCPUCFSQuota), Overhead: overheadResources(overhead, r.cfg.DisableCPUCFSQuota)}
	_, err := r.rs.UpdatePodSandboxResources(ctx, req)
	if err == nil {
		return nil
	}
	if st, _ := status.FromError(err); st.Code() == codes.Unimplemented ||
		(st.Code() == codes.Unknown && strings.Contains(st.Message(), "not implemented")) {
		klog.FromContext(ctx).V(3).Info("UpdatePodSandboxResources unimplemented by the runtime; the call is best-effort, the resize goes on", "sandboxID", sandboxID)
		return nil
	}
	return fmt.Errorf("criruntime: update resources of sandbox %s: %w", sandboxID, err)
}

// overheadResources maps a pod's overhead to CRI resources as upstream:
// empty without overhead; else shares and quota from its CPU, the memory
// limit from its memory, each only where the overhead names it.
func overheadResources(overhead v1.ResourceList, noQuota bool) *runtimeapi.LinuxContainerResources {
	if overhead == nil {
		return &runtimeapi.LinuxContainerResources{}
	}
	o := resizeResources(v1.ResourceRequirements{Requests: overhead, Limits: overhead}, noQuota)
	if overhead.Memory().IsZero() {
		o.MemoryLimitInBytes = 0
	}
	if overhead.Cpu().IsZero() && !noQuota {
		o.CpuQuota = 0
	}
	return o
}
