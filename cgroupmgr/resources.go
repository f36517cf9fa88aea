package cgroupmgr

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodekit/nodekit/internal/cpushares"
	"github.com/nodekit/nodekit/internal/qos"
)

// ResourceConfig is what a driver writes to one cgroup. A nil field leaves
// the cgroup's current value alone.
type ResourceConfig struct {
	// CPUShares is the v1 cpu.shares (2..262144); on v2 it becomes
	// cpu.weight through CPUSharesToWeight.
	CPUShares *uint64
	// CPUQuota and CPUPeriod are the CFS bandwidth in microseconds; a
	// quota of -1 is unlimited.
	CPUQuota  *int64
	CPUPeriod *uint64
	// Memory is the memory limit in bytes; -1 is unlimited.
	Memory *int64
	// PidsLimit is the most processes; -1 (or 0) is unlimited.
	PidsLimit *int64
	// HugePageLimit maps a huge page size in bytes to a limit in bytes.
	// Nil leaves hugetlb alone; otherwise every other page size the cgroup
	// offers gets HugePageOthers (0 when nil), as upstream: a pod that asks
	// for no huge pages of a size may use none.
	HugePageLimit  map[int64]int64
	HugePageOthers *int64
}

// Upstream's CPU constants (kernel limits and kubelet defaults).
const (
	MinShares      = cpushares.Min
	MaxShares      = cpushares.Max
	SharesPerCPU   = cpushares.PerCPU
	milliCPUToCPU  = 1000
	QuotaPeriod    = 100000 // 100ms, in microseconds
	MinQuotaPeriod = 1000   // the smallest quota the kernel takes, 1ms

	// unboundedHugePages is the hugetlb limit of the QoS tiers, as upstream.
	unboundedHugePages = int64(1) << 62
)

// MilliCPUToShares converts a CPU request to cpu.shares as upstream: no
// request is the minimum (2), not the kernel's default of 1024.
func MilliCPUToShares(milliCPU int64) uint64 { return cpushares.FromMilliCPU(milliCPU) }

// MilliCPUToQuota converts a CPU limit to a CFS quota over period (both in
// microseconds), at least 1ms; no limit is 0.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	quota := milliCPU * period / milliCPUToCPU
	if quota < MinQuotaPeriod {
		quota = MinQuotaPeriod
	}
	return quota
}

// CPUSharesToWeight maps cpu.shares [2, 262144] onto the v2 cpu.weight
// range [1, 10000] as upstream (KEP-2254).
func CPUSharesToWeight(shares uint64) uint64 { return cpushares.ToWeight(shares) }

// CPUWeightToShares maps a v2 cpu.weight [1, 10000] back to cpu.shares
// as upstream reads a cgroup's weight (KEP-2254's inverse): the round trip
// through CPUSharesToWeight loses precision. 0 is taken as 1.
func CPUWeightToShares(weight uint64) uint64 { return cpushares.FromWeight(weight) }

// HugePageLimits sums the hugepages-<size> entries of list by page size in
// bytes; entries whose size does not parse are skipped.
func HugePageLimits(list v1.ResourceList) map[int64]int64 {
	out := map[int64]int64{}
	for name, q := range list {
		size, ok := hugePageSize(name)
		if !ok {
			continue
		}
		out[size] += q.Value()
	}
	return out
}

func hugePageSize(name v1.ResourceName) (int64, bool) {
	s, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
	if !ok {
		return 0, false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Value() <= 0 {
		return 0, false
	}
	return q.Value(), true
}

// hugePageUnit spells a page size the way hugetlb file names do: 2097152
// is "2MB", 1073741824 "1GB".
func hugePageUnit(size int64) (string, error) {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size%1024 == 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	if size > 1024 && i < len(units)-1 {
		return "", fmt.Errorf("cgroupmgr: huge page size %d%s is not a power-of-1024 multiple", size, units[i])
	}
	return fmt.Sprintf("%d%s", size, units[i]), nil
}

// ResourceConfigForPod is the config of a pod's cgroup, as upstream's
// ResourceConfigForPod with pod-level resources on (their beta default):
//   - requests and limits are summed over the containers, init containers
//     counting by the max rule and restartable init containers (sidecars)
//     adding to what follows them, plus the pod overhead; pod-level
//     resources, when set, take precedence;
//   - cpu.shares come from the CPU request (BestEffort: 2);
//   - a CFS quota (over cpuPeriod microseconds) from the CPU limit, for
//     Guaranteed pods and for Burstable pods whose every container (or the
//     pod) has a CPU limit; enforceCPULimits false makes it -1;
//   - a memory limit for Guaranteed pods and for Burstable pods whose every
//     container (or the pod) has a memory limit;
//   - hugetlb limits from the hugepages requests, 0 for other sizes.
func ResourceConfigForPod(pod *v1.Pod, enforceCPULimits bool, cpuPeriod uint64) *ResourceConfig {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})

	cpuLimited, memLimited := true, true
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Resources.Limits.Cpu().IsZero() {
				cpuLimited = false
			}
			if list[i].Resources.Limits.Memory().IsZero() {
				memLimited = false
			}
		}
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		if !pod.Spec.Resources.Limits.Cpu().IsZero() {
			cpuLimited = true
		}
		if !pod.Spec.Resources.Limits.Memory().IsZero() {
			memLimited = true
		}
	}

	var cpuReq, cpuLim, memLim int64
	if q, ok := reqs[v1.ResourceCPU]; ok {
		cpuReq = q.MilliValue()
	}
	if q, ok := limits[v1.ResourceCPU]; ok {
		cpuLim = q.MilliValue()
	}
	if q, ok := limits[v1.ResourceMemory]; ok {
		memLim = q.Value()
	}
	shares := MilliCPUToShares(cpuReq)
	quota := MilliCPUToQuota(cpuLim, int64(cpuPeriod))
	if !enforceCPULimits {
		quota = -1
	}
	period := cpuPeriod

	rc := &ResourceConfig{HugePageLimit: HugePageLimits(reqs)}
	switch qos.Class(pod) {
	case v1.PodQOSGuaranteed:
		rc.CPUShares, rc.CPUQuota, rc.CPUPeriod, rc.Memory = &shares, &quota, &period, &memLim
	case v1.PodQOSBurstable:
		rc.CPUShares = &shares
		if cpuLimited {
			rc.CPUQuota, rc.CPUPeriod = &quota, &period
		}
		if memLimited {
			rc.Memory = &memLim
		}
	default:
		minShares := uint64(MinShares)
		rc.CPUShares = &minShares
	}
	return rc
}

// configForLimits is the config of a cgroup sized to list (kubepods, or
// the kube- and system-reserved cgroups), as upstream's getCgroupConfig:
// memory, cpu shares, pids (the "pid" resource) and huge pages; with
// compressibleOnly, cpu shares alone.
func configForLimits(list v1.ResourceList, compressibleOnly bool) *ResourceConfig {
	rc := &ResourceConfig{}
	if q, ok := list[v1.ResourceCPU]; ok {
		shares := MilliCPUToShares(q.MilliValue())
		rc.CPUShares = &shares
	}
	if compressibleOnly {
		return rc
	}
	if q, ok := list[v1.ResourceMemory]; ok {
		v := q.Value()
		rc.Memory = &v
	}
	if q, ok := list[ResourcePID]; ok {
		v := q.Value()
		rc.PidsLimit = &v
	}
	rc.HugePageLimit = HugePageLimits(list)
	return rc
}

// ResourcePID is the node-internal resource "pid" (the node's pid_max):
// in Config.Capacity and the reserved lists it sizes pids.max of kubepods,
// as upstream's internal capacity does.
const ResourcePID v1.ResourceName = "pid"

func ptr[T any](v T) *T { return &v }
