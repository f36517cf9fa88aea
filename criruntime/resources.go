package criruntime

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
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

// containerResources maps requests and limits to the CRI resources.
func (r *Runtime) containerResources(_ *v1.Pod, c *v1.Container, opts *nodekit.ContainerOptions) *runtimeapi.LinuxContainerResources {
	res := &runtimeapi.LinuxContainerResources{CpusetCpus: opts.CPUSet, CpusetMems: opts.CPUSetMems}
	req := c.Resources.Requests.Cpu().MilliValue()
	lim := c.Resources.Limits.Cpu().MilliValue()
	if req == 0 && lim != 0 {
		req = lim // the API server defaults requests to limits; files may not
	}
	res.CpuShares = milliCPUToShares(req)
	if lim != 0 && !r.cfg.DisableCPUCFSQuota {
		res.CpuPeriod = quotaPeriodUs
		res.CpuQuota = milliCPUToQuota(lim)
	}
	res.MemoryLimitInBytes = c.Resources.Limits.Memory().Value()
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
