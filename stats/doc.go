// Package stats owns node, pod and container statistics assembled into the
// upstream Summary API (k8s.io/kubelet/pkg/apis/stats/v1alpha1): node CPU
// (root cpuacct cgroup or /proc/stat), memory working set and available
// (root memory cgroup or /proc/meminfo, as upstream computes
// memory.available), PIDs, nodefs (statfs of the root dir) and imagefs
// (the runtime's ImageFsInfo plus statfs); pod and container CPU, memory,
// network and processes from CRI stats; writable layers, logs, emptyDir
// volumes and per-pod ephemeral storage. CPU nanocores come from two
// readings with an injected clock when the runtime gives none.
//
// The volumes of the pods Config.Specs lists are measured every
// Config.VolumeStatsPeriod (kubelet's volumeStatsAggPeriod; never at 0):
// emptyDir, configMap, secret, downwardAPI and projected volumes by a walk
// of their directory, plugin volumes (persistentVolumeClaim, ephemeral
// and csi) by Config.Volumes (csi.Plugin's NodeGetVolumeStats).
// MeasureVolumes is the step, RunVolumeStats the loop, as upstream's
// volume stat calculators; the Summary reports what was last measured. The Summary reports them
// with their pvcRef, and RegisterVolumeMetrics serves the
// kubelet_volume_stats_* gauges of the PVC-backed ones from the same
// measurement.
//
// Pressure (PSI) blocks follow kubelet v1.37 on containerd (its CRI stats
// provider takes them from cadvisor): cpu, memory and io psi for the node
// (root cgroup), each pod (Config.PodCgroups locates its cgroup) and each
// container (the pod cgroup's child named by the container ID, or
// *-ID.scope). Under cgroup v2 they hold the cpu.pressure,
// memory.pressure and io.pressure files (totals in microseconds, as
// written; a missing file gives zeros); under cgroup v1 they are zero
// blocks for the controllers the cgroup is in (a hybrid unified mount is
// ignored). With onlyCPUAndMemory there are no io blocks. A container
// whose cgroup is not found keeps the runtime's PSI (none from containerd
// 1.6) and an io block with only a time; a pod without a cgroup gets no
// PSI. A malformed pressure file leaves its block out (upstream's cadvisor
// fails that cgroup's stats). SystemContainers are not reported.
//
// Provider serves server.StatsProvider, eviction.SummaryProvider (and
// eviction.NodeSummaryProvider: NodeSummary, the node's part alone, which
// reads no pod's stats and leaves the pods' CPU samples as they were) and
// gc.ImageFsStats. It does not act on the numbers.
//
// Usage:
//
//	p, err := stats.New(stats.Config{NodeName: name, RootDir: "/var/lib/kubelet",
//		PodLogsDir: "/var/log/pods", Runtime: criRuntime, Pods: criRuntime})
//	go p.RunVolumeStats(ctx) // with Config.Specs and Config.Volumes
//	sum, err := p.Summary(ctx, false)
package stats
