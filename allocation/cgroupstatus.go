package allocation

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/cpushares"
)

// PodCgroupReader reads back what a pod's cgroup holds
// (cgroupmgr.Manager's ReadPodCgroup, adapted). Nil: a running pod's
// status.resources shows the values last applied to it instead.
type PodCgroupReader interface {
	// ReadPodCgroup returns the CPU and memory limits of pod's cgroup.
	// When a part cannot be read its fields are nil and err says why; the
	// other part may still be set. It may read files; it must not keep
	// pod.
	ReadPodCgroup(ctx context.Context, pod *v1.Pod) (PodCgroupValues, error)
}

// PodCgroupReaderFunc adapts a function to PodCgroupReader.
type PodCgroupReaderFunc func(ctx context.Context, pod *v1.Pod) (PodCgroupValues, error)

// ReadPodCgroup calls f.
func (f PodCgroupReaderFunc) ReadPodCgroup(ctx context.Context, pod *v1.Pod) (PodCgroupValues, error) {
	return f(ctx, pod)
}

// PodCgroupValues are a pod cgroup's limits as read back, as upstream's
// ResourceConfig: nil where not read.
type PodCgroupValues struct {
	// CPUShares is cpu.shares; on cgroup v2, cpu.weight converted back to
	// shares (upstream's lossy inverse of its shares-to-weight mapping).
	CPUShares *uint64
	// CPUQuota (-1 when unlimited) and CPUPeriod are the CFS bandwidth in
	// microseconds.
	CPUQuota  *int64
	CPUPeriod *uint64
	// Memory is the memory limit in bytes, -1 when unlimited on cgroup v2
	// (v1 reports an unlimited cgroup as a large value, kept as read).
	Memory *int64
}

// PodCgroupResources are what a running pod's status.resources is built
// from (PodLevelStatus): the pod cgroup's CPU request (from its shares),
// CPU limit (from its quota) and memory limit, each nil when the cgroup
// has none (unlimited) or it was not known.
type PodCgroupResources struct {
	CPURequest, CPULimit, MemoryLimit *resource.Quantity
	// CPUShares are the shares read back from the cgroup, nil when the
	// CPU values were not read from it: with them a CPU request that only
	// differs from the allocation by cgroup v2's rounding is reported as
	// allocated, as upstream.
	CPUShares *uint64
}

// ResourcesFromCgroup converts what a pod cgroup holds to the values its
// status reports, as upstream's CPURequestsFromConfig, CPULimitsFromConfig
// and MemoryLimitsFromConfig: shares to milli-CPU rounded up (below the
// minimum of 2 shares, none), quota over period to milli-CPU rounded
// down, memory in bytes; an unlimited or zero value is nil.
func ResourcesFromCgroup(v PodCgroupValues) PodCgroupResources {
	var out PodCgroupResources
	if v.CPUShares != nil {
		shares := *v.CPUShares
		out.CPUShares = &shares
		if milli := cpushares.ToMilliCPU(shares); milli > 0 {
			out.CPURequest = resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
	}
	if v.CPUPeriod != nil && *v.CPUPeriod > 0 && v.CPUQuota != nil && *v.CPUQuota > 0 {
		if milli := *v.CPUQuota * 1000 / int64(*v.CPUPeriod); milli > 0 {
			out.CPULimit = resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
	}
	if v.Memory != nil && *v.Memory > 0 {
		out.MemoryLimit = resource.NewQuantity(*v.Memory, resource.BinarySI)
	}
	return out
}

// appliedResources are the pod cgroup's values as derived from pod at
// what was last applied to it: the totals the cgroup was sized to.
func appliedResources(pod *v1.Pod) PodCgroupResources {
	var out PodCgroupResources
	cpuLim, cpuLimited, cpuReq := podTotals(pod, v1.ResourceCPU)
	if cpuReq > 0 {
		out.CPURequest = resource.NewMilliQuantity(cpuReq, resource.DecimalSI)
	}
	if cpuLimited && cpuLim > 0 {
		out.CPULimit = resource.NewMilliQuantity(cpuLim, resource.DecimalSI)
	}
	if memLim, memLimited, _ := podTotals(pod, v1.ResourceMemory); memLimited && memLim > 0 {
		out.MemoryLimit = resource.NewQuantity(memLim/1000, resource.BinarySI)
	}
	return out
}

// runningResources are the values a running pod's status.resources is
// built from: read back from the pod cgroup (Config.PodCgroupReader), or,
// for what cannot be read (the error is logged, as upstream logs it) or
// without a reader, derived from what was last applied (applied; nil when
// nothing was). Nil when neither is known.
func (m *Manager) runningResources(ctx context.Context, pod, applied *v1.Pod) *PodCgroupResources {
	var derived *PodCgroupResources
	if applied != nil {
		d := appliedResources(applied)
		derived = &d
	}
	if m.cfg.PodCgroupReader == nil {
		return derived
	}
	v, err := m.cfg.PodCgroupReader.ReadPodCgroup(ctx, pod)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to read the pod cgroup's limits; status.resources shows those last applied", "pod", klog.KObj(pod))
	}
	cpuRead, memRead := v.CPUShares != nil, v.Memory != nil
	if !cpuRead && !memRead {
		return derived
	}
	out := ResourcesFromCgroup(v)
	if derived != nil && !cpuRead {
		out.CPURequest, out.CPULimit = derived.CPURequest, derived.CPULimit
	}
	if derived != nil && !memRead {
		out.MemoryLimit = derived.MemoryLimit
	}
	return &out
}

// sharesEqualAfterV2RoundTrip reports whether readback is allocated
// written as a cgroup v2 weight and read back as shares (upstream's
// cm.CPUSharesEqualAfterV2RoundTrip).
func sharesEqualAfterV2RoundTrip(allocated, readback uint64) bool {
	return cpushares.FromWeight(cpushares.ToWeight(allocated)) == readback
}
