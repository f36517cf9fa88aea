package criruntime

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
)

// CPU shares and quota as the upstream kubelet computes them on Linux.
const (
	minShares     = 2
	maxShares     = 262144
	sharesPerCPU  = 1024
	milliPerCPU   = 1000
	quotaPeriodUs = 100000
	minQuotaUs    = 1000
)

func milliCPUToShares(milli int64) int64 {
	if milli == 0 {
		return minShares
	}
	s := milli * sharesPerCPU / milliPerCPU
	switch {
	case s < minShares:
		return minShares
	case s > maxShares:
		return maxShares
	}
	return s
}

func milliCPUToQuota(milli int64) int64 {
	if milli == 0 {
		return 0
	}
	q := milli * quotaPeriodUs / milliPerCPU
	if q < minQuotaUs {
		return minQuotaUs
	}
	return q
}

// podLevelLimit is the container's limit of name, or, when it has none,
// the pod-level one (spec.resources), as upstream applies pod-level
// limits to the containers without their own.
func podLevelLimit(pod *v1.Pod, c *v1.Container, name v1.ResourceName) *resource.Quantity {
	own := c.Resources.Limits[name]
	if own.IsZero() && pod != nil && pod.Spec.Resources != nil {
		if q := pod.Spec.Resources.Limits[name]; !q.IsZero() {
			return &q
		}
	}
	return &own
}

// containerResources maps requests and limits to the CRI resources; a
// CPU or memory limit the container lacks is the pod-level one.
func (r *Runtime) containerResources(pod *v1.Pod, c *v1.Container, opts *nodekit.ContainerOptions) *runtimeapi.LinuxContainerResources {
	res := &runtimeapi.LinuxContainerResources{CpusetCpus: opts.CPUSet, CpusetMems: opts.CPUSetMems}
	req := c.Resources.Requests.Cpu().MilliValue()
	lim := podLevelLimit(pod, c, v1.ResourceCPU).MilliValue()
	if req == 0 && lim != 0 {
		req = lim // the API server defaults requests to limits; files may not
	}
	res.CpuShares = milliCPUToShares(req)
	if lim != 0 && !r.cfg.DisableCPUCFSQuota {
		res.CpuPeriod = quotaPeriodUs
		res.CpuQuota = milliCPUToQuota(lim)
	}
	res.MemoryLimitInBytes = podLevelLimit(pod, c, v1.ResourceMemory).Value()
	if opts.OOMScoreAdj != nil {
		res.OomScoreAdj = int64(*opts.OOMScoreAdj)
	}
	return res
}

// UpdateContainerResources moves a running container to another cpuset
// (the CPU manager's reconcile). Only the cpuset is sent; the runtime keeps
// the other limits.
func (r *Runtime) UpdateContainerResources(ctx context.Context, id nodekit.ContainerID, cpuset string) error {
	if err := r.rs.UpdateContainerResources(ctx, id.ID, &runtimeapi.ContainerResources{
		Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: cpuset},
	}); err != nil {
		return fmt.Errorf("criruntime: update cpuset of %s: %w", id, err)
	}
	return nil
}
