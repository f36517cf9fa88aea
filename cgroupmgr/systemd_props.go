package cgroupmgr

import (
	"math"
	"path"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// systemdInfinity is systemd's "infinity" for byte, task and time limits
// (UINT64_MAX).
const systemdInfinity = uint64(math.MaxUint64)

// minQuotaPeriodVersion is the first systemd with CPUQuotaPeriodUSec.
const minQuotaPeriodVersion = 242

// sliceUnits are name's slice unit and its parent slice:
// {"kubepods", "burstable"} is "kubepods-burstable.slice" in
// "kubepods.slice"; a top-level slice's parent is "-.slice".
func sliceUnits(name CgroupName) (unit, parent string) {
	unit = path.Base(name.ToSystemd())
	parent = "-.slice"
	if len(name) > 1 {
		parent = path.Base(name[:len(name)-1].ToSystemd())
	}
	return unit, parent
}

// sliceProperties are the properties a slice is created with, as
// upstream's systemd manager (opencontainers/cgroups) sets them for a
// slice: it Wants its parent slice, accounts for every controller and has
// no default dependencies. Delegate is for scopes only (systemd refuses
// it on a slice), so a slice gets none.
func sliceProperties(name CgroupName, version Version) []sddbus.Property {
	unit, parent := sliceUnits(name)
	io := "IOAccounting"
	if version == V1 {
		io = "BlockIOAccounting"
	}
	return []sddbus.Property{
		sddbus.PropDescription("nodekit cgroup " + unit),
		sddbus.PropWants(parent),
		prop("MemoryAccounting", true),
		prop("CPUAccounting", true),
		prop(io, true),
		prop("TasksAccounting", true),
		prop("DefaultDependencies", false),
	}
}

// resourceProperties turns rc into unit properties for systemd's version
// sdVersion on cgroup version, as upstream: v1 MemoryLimit and CPUShares,
// v2 MemoryMax and CPUWeight; CPUQuotaPerSecUSec (and, from systemd 242,
// CPUQuotaPeriodUSec); TasksMax. systemd keeps the CPU quota as a
// percentage, so a quota that is not a whole 1% of a CPU second is
// rounded up to the next: the returned ResourceConfig carries the rounded
// quota, which the caller writes to the cgroup files too, so systemd and
// the files agree. Huge pages have no unit property; the files carry
// them.
func resourceProperties(rc *ResourceConfig, version Version, sdVersion int) ([]sddbus.Property, *ResourceConfig) {
	out := *rc
	var props []sddbus.Property
	if rc.Memory != nil && *rc.Memory != 0 {
		limit := systemdInfinity
		if *rc.Memory > 0 {
			limit = uint64(*rc.Memory)
		}
		if version == V1 {
			props = append(props, prop("MemoryLimit", limit))
		} else {
			props = append(props, prop("MemoryMax", limit))
		}
	}
	if rc.CPUShares != nil {
		if version == V1 {
			props = append(props, prop("CPUShares", *rc.CPUShares))
		} else {
			props = append(props, prop("CPUWeight", CPUSharesToWeight(*rc.CPUShares)))
		}
	}
	props = append(props, quotaProperties(&out, sdVersion)...)
	if rc.PidsLimit != nil {
		tasks := systemdInfinity
		if *rc.PidsLimit > 0 {
			tasks = uint64(*rc.PidsLimit)
		}
		props = append(props, prop("TasksMax", tasks))
	}
	return props, &out
}

// quotaProperties are the CFS bandwidth properties of rc, rounding
// rc.CPUQuota up as systemd will.
func quotaProperties(rc *ResourceConfig, sdVersion int) []sddbus.Property {
	var props []sddbus.Property
	period := uint64(0)
	if rc.CPUPeriod != nil {
		period = *rc.CPUPeriod
	}
	if period != 0 && sdVersion >= minQuotaPeriodVersion {
		props = append(props, prop("CPUQuotaPeriodUSec", period))
	}
	quota := int64(0)
	if rc.CPUQuota != nil {
		quota = *rc.CPUQuota
	}
	if quota == 0 && period == 0 {
		return props
	}
	perSec := systemdInfinity
	if quota > 0 {
		if period == 0 {
			period = QuotaPeriod
		}
		perSec = uint64(quota) * 1000000 / period
		if perSec%10000 != 0 {
			perSec = (perSec/10000 + 1) * 10000
			rounded := int64(perSec * period / 1000000)
			rc.CPUQuota = &rounded
		}
	}
	return append(props, prop("CPUQuotaPerSecUSec", perSec))
}

func prop(name string, value any) sddbus.Property {
	return sddbus.Property{Name: name, Value: dbus.MakeVariant(value)}
}
