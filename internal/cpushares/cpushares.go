// Package cpushares holds upstream kubelet's conversions between CPU
// requests and the kernel's CPU weights: cgroup v1 cpu.shares and cgroup
// v2 cpu.weight (KEP-2254's mapping and its lossy inverse). cgroupmgr
// writes cgroups with them and allocation reads a pod cgroup back with
// them, so both agree on every rounding.
package cpushares

// Upstream's limits: cpu.shares spans [Min, Max], cpu.weight [1, MaxWeight].
const (
	Min       = 2
	Max       = 262144
	PerCPU    = 1024
	MaxWeight = 10000
)

// FromMilliCPU converts a CPU request to cpu.shares: no request is the
// minimum (2), not the kernel's default of 1024; clamped to [Min, Max].
func FromMilliCPU(milliCPU int64) uint64 {
	if milliCPU == 0 {
		return Min
	}
	return uint64(min(max(milliCPU*PerCPU/1000, Min), Max))
}

// ToMilliCPU converts cpu.shares back to a CPU request, rounded up; below
// the minimum, none.
func ToMilliCPU(shares uint64) int64 {
	if shares < Min {
		return 0
	}
	return (int64(shares)*1000 + PerCPU - 1) / PerCPU
}

// ToWeight maps cpu.shares onto cgroup v2's cpu.weight.
func ToWeight(shares uint64) uint64 {
	if shares >= Max {
		return MaxWeight
	}
	shares = max(shares, Min)
	return 1 + (shares-Min)*(MaxWeight-1)/(Max-Min)
}

// FromWeight maps a cpu.weight back to cpu.shares, as upstream reads a v2
// cgroup: ToWeight's inverse, losing what ToWeight rounded off. 0 is
// taken as 1.
func FromWeight(weight uint64) uint64 {
	weight = max(weight, 1)
	return (weight-1)*(Max-Min)/(MaxWeight-1) + Min
}
