package criruntime

import (
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
func (r *Runtime) containerResources(_ *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources {
	res := &runtimeapi.LinuxContainerResources{}
	req := c.Resources.Requests.Cpu().MilliValue()
	lim := c.Resources.Limits.Cpu().MilliValue()
	if req == 0 && lim != 0 {
		req = lim // the API server defaults requests to limits; files may not
	}
	res.CpuShares = milliCPUToShares(req)
	if lim != 0 {
		res.CpuPeriod = quotaPeriodUs
		res.CpuQuota = milliCPUToQuota(lim)
	}
	res.MemoryLimitInBytes = c.Resources.Limits.Memory().Value()
	return res
}
