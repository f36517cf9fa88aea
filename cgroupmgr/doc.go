// Package cgroupmgr owns the pod side of the node's cgroups, as upstream
// kubelet's container manager (pkg/kubelet/cm): the node-allocatable
// cgroup kubepods, the QoS tiers kubepods/burstable and kubepods/besteffort
// (Guaranteed pods sit in kubepods itself), and one cgroup per pod,
// pod<UID>, sized to the pod's summed requests and limits. Containers go
// below their pod's cgroup: the runtime puts them there when the sandbox
// is created with the cgroup parent EnsurePod returns.
//
// ReadPodCgroup reads a pod cgroup's CPU and memory limits back (cpu
// shares, the v2 weight converted back as upstream, CFS quota and period,
// memory limit) for the pod's status.resources.
//
// It holds the arithmetic too, as pure functions: ResourceConfigForPod
// (cpu shares, CFS quota, memory and huge page limits of a pod),
// NodeAllocatable (kubepods limits, the reservation and the allocatable
// the node status reports) and OOMScoreAdj (a container's oom_score_adj).
// The kernel tunables the container manager needs (KernelDefaults) are
// checked (CheckKernelDefaults, protectKernelDefaults: true) or set
// (SetKernelDefaults, the default), under a procfs root the caller names.
// Sub-package oomwatch reports kernel OOM kills from /dev/kmsg.
//
// Cgroups are written by a Driver. The built-in cgroupfs driver writes the
// cgroup file system itself, on cgroup v1 (every mounted hierarchy) or v2
// (the version is detected from the file system under Config.Root, never
// assumed).
//
// The built-in systemd driver (cgroupDriver "systemd") makes every cgroup
// a slice, named as upstream (kubepods.slice, kubepods-burstable.slice,
// kubepods-burstable-pod<UID>.slice with the UID's "-" written "_"),
// started over D-Bus as a transient unit with the properties upstream's
// systemd manager gives a slice (Wants= its parent, CPU, memory, IO and
// tasks accounting, DefaultDependencies=no; Delegate is for scopes, which
// the runtime makes) and sized by unit properties: MemoryLimit and
// CPUShares on v1, MemoryMax and CPUWeight on v2, CPUQuotaPerSecUSec and
// CPUQuotaPeriodUSec, TasksMax. As upstream, it writes the same limits to
// the cgroup files too (huge pages and v1 cpuset have no property), with
// a CPU quota rounded up to a whole percent as systemd keeps it. To
// remove a slice it kills what still runs there (as upstream kills a pod
// cgroup's processes first), stops the unit, then removes what systemd
// left. The bus
// is Config.SystemdBus (the system bus by default); Config.SystemdCgroupBase
// says where systemd's root cgroup lies when systemd runs in a cgroup
// namespace of its own. EnsurePod returns the expanded slice path kubelet
// gives the runtime ("/kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<UID>.slice"; containerd's systemd mode takes its
// last element as the parent slice of the pod's scopes). It is tested
// against a real systemd 252 on cgroup v1 (the hybrid layout), QOSReserved's
// memory limits on the QoS slices included, with runc's
// systemd driver putting a container in a scope of a pod's slice, and end
// to end in examples/fullagent (containerd with SystemdCgroup, the slices
// compared with kubelet v1.37.2's). On cgroup v2 it is tested against
// a real systemd 252 as PID 1 of a Debian 12 guest on the unified
// hierarchy (internal/localvm's TestCgroupV2 runs this package's
// real-cgroup tests there: MemoryMax, CPUWeight, CPUQuotaPerSecUSec
// and TasksMax read from the units and the files, QOSReserved, runc's
// scope in a pod slice); not end to end with containerd and the agent.
//
// The cgroupfs driver is tested on real cgroups of both versions: v1 on
// this machine, v2 in that guest (the weights are upstream's
// 1 + (shares-2)*9999/262142 and read back as its inverse). One
// difference between the versions shows in UpdateQOS: a QoS tier whose
// usage is above its new QOSReserved limit keeps its usage as the limit
// on v1, where the kernel refuses the write; on v2 the kernel takes the
// limit and OOM-kills in the tier, as under upstream's kubelet.
//
// It speaks D-Bus through github.com/coreos/go-systemd/v22/dbus rather
// than opencontainers/cgroups' systemd manager, which upstream wraps: that
// manager dials the bus named by the process environment
// ($DBUS_SYSTEM_BUS_ADDRESS), computes paths assuming systemd is the
// host's init, and brings its own copy of the cgroupfs writers; here the
// bus address is configuration, the paths follow SystemdCgroupBase, and
// the file writes are this package's fsDriver laid out as slices.
//
// Config.Backend takes a Driver of a vendor's own instead.
//
// It does not decide which pods are active or when a pod is gone (the
// agent tells it), does not place containers (the runtime does, below the
// cgroup parent), and does not pin CPUs or memory nodes (cpumanager and
// memorymanager do). It runs no goroutine: the agent calls UpdateQOS from
// housekeeping, as upstream's once-a-minute loop. Close releases the
// systemd driver's bus connection.
//
// Where it differs from upstream, on purpose: upstream writes every QoS
// tier at each new pod's start as well. EnsureQOS, for that call, writes
// nothing when the sizes are those last written in full, so a burst of
// BestEffort pods costs no QoS writes (on cgroup v1 each write of the
// tiers is a mkdir of each level and the cpuset checks in each hierarchy,
// then the shares and huge page files of three tiers: 11–13% of
// fullagent's CPU in a 100-pod burst before EnsureQOS). UpdateQOS always
// writes, so housekeeping still sets again a value changed by someone
// else.
//
// How an agent wires it:
//
//	cg, err := cgroupmgr.New(cgroupmgr.Config{
//		Driver: "cgroupfs", CgroupRoot: "/", CgroupsPerQOS: true,
//		EnforceNodeAllocatable: []string{"pods"},
//		Capacity: capacity, KubeReserved: kubeReserved, SystemReserved: systemReserved,
//	})
//	// At boot, before any pod starts:
//	err = cg.Start(ctx)
//	err = cg.UpdateQOS(ctx, activePods())
//
//	// In the sandbox-options hook, before the sandbox is created, when
//	// the pod's cgroup does not exist yet:
//	err = cg.EnsureQOS(ctx, activePods()) // the pod among them
//	opts.CgroupParent, err = cg.EnsurePod(ctx, pod) // "/kubepods/burstable/pod<UID>"
//
//	// In the container-options hook (the runtime sets it in the OCI spec):
//	adj := cgroupmgr.OOMScoreAdj(pod, container, memoryCapacityBytes)
//
//	// Once the pod is terminated and its containers are removed:
//	err = cg.DestroyPod(ctx, pod.UID)
//
//	// From housekeeping: QoS tiers, and cgroups of pods that are gone.
//	err = cg.UpdateQOS(ctx, activePods())
//	uids, err := cg.ListPodCgroups(ctx)
//	for _, uid := range uids {
//		if !known(uid) {
//			err = cg.DestroyPod(ctx, uid)
//		}
//	}
package cgroupmgr
