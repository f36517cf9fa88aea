// Package cgroupmgr owns the pod side of the node's cgroups, as upstream
// kubelet's container manager (pkg/kubelet/cm): the node-allocatable
// cgroup kubepods, the QoS tiers kubepods/burstable and kubepods/besteffort
// (Guaranteed pods sit in kubepods itself), and one cgroup per pod,
// pod<UID>, sized to the pod's summed requests and limits. Containers go
// below their pod's cgroup: the runtime puts them there when the sandbox
// is created with the cgroup parent EnsurePod returns.
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
// assumed). The systemd driver names cgroups as systemd slices
// (kubepods.slice/kubepods-burstable.slice/...) but cannot create them
// without systemd's D-Bus API, which this package does not speak: it
// returns ErrSystemdUnsupported, and a vendor plugs a Driver of its own in
// Config.Backend.
//
// It does not decide which pods are active or when a pod is gone (the
// agent tells it), does not place containers (the runtime does, below the
// cgroup parent), and does not pin CPUs or memory nodes (cpumanager and
// memorymanager do). It runs no goroutine: the agent calls UpdateQOS from
// housekeeping, as upstream's once-a-minute loop.
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
//	// In the sandbox-options hook, before the sandbox is created:
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
