// Package containermetrics serves the series of kubelet's
// /metrics/cadvisor: container_* for the root cgroup, the kubepods tree
// (QoS, pod and container cgroups) and any other cgroup roots given, and
// machine_* and cadvisor_version_info, with kubelet v1.37's label set:
// id (the cgroup), name (the runtime's container ID), image, pod,
// namespace and container; a pod cgroup carries pod and namespace only,
// a pod's sandbox (pause) container carries container="" and the
// sandbox image, and the QoS and root cgroups the id alone. Network
// series are served for the root and the sandboxes, whose network
// namespace the pod's containers share. The root also carries the
// container_fs_* series of the machine's filesystems, by device: those
// cadvisor's filesystem plugins (as kubelet installs them) take from the
// mount table read at start (ProcDir/self/mountinfo; bind mounts left
// out): ext*, xfs and other disk filesystems labelled by their device
// (/dev/vda), each tmpfs by its mountpoint, each overlay as
// overlay_0-MINOR, NFS, btrfs and ZFS; usage and inodes from statfs(2),
// the I/O counters from /proc/diskstats (sd*, vd*, xvd* and dm-* only;
// zeros for the rest). Their *_seconds_total are diskstats' milliseconds
// divided by 1e9, as cadvisor serves them. container_ulimits_soft
// (max_open_files only, as cadvisor) is served for the root (pid 1) and
// the containers and sandboxes (their lowest pid, where cadvisor asks
// containerd for the task's).
//
// Every cgroup that did block I/O also carries cadvisor's per-device
// series of its own counters: container_blkio_device_usage_total (device,
// major, minor, operation: each operation of the bytes file),
// container_fs_reads_bytes_total and container_fs_writes_bytes_total, and
// per-device samples of container_fs_reads_total, _writes_total and (where
// the scheduler's files have them: BFQ debug or CFQ) the sector, merged,
// service-time and queued series. Under v1 the blkio files are tried in
// the order of the runtime's cgroup library (blkio.bfq.*, CFQ's
// blkio.*_recursive, blkio.throttle.*_recursive, blkio.throttle.*);
// under v2 io.stat's rbytes, wbytes, rios and wios, and, where the iocost
// controller is on, its cost.usage, cost.wait, cost.indebt and
// cost.indelay as container_fs_io_cost_{usage,wait,indebt,indelay}_
// seconds_total (microseconds in seconds, a sample per device that has
// them, as cadvisor). A device is named
// /dev/NAME from RootDir/sys/block (read at start; loop, ram and sr left
// out), else by the filesystem of that number, else "".
//
// It reads the cgroup files (v1 or v2) and /proc itself on each scrape;
// the runtime (a PodLister, criruntime.Runtime) only names the cgroups.
// It does not link github.com/google/cadvisor/lib, which upstream kubelet
// does: cadvisor's manager keeps package-level state (its settings are
// flags on the global flag set, its container handlers register in
// init()), starts a housekeeping goroutine per cgroup with inotify
// watches, and names containers by calling containerd's own API (not
// CRI) on a socket set by a global flag (/run/containerd/containerd.sock:
// against the private containerd of agenttest its containerd factory
// fails to register, and containers would lose every label but id).
// Measured on this machine (2026-12-01, Go 1.26, linux/amd64): a program
// that starts cadvisor's manager with kubelet's handlers and its
// Prometheus collector is 21.2 MB against 12.4 MB for the same program
// with client_golang and klog alone (+8.8 MB; fullagent already links
// part of it, e.g. gRPC), and holds 21.3 MB RSS and 8 threads after 30 s
// watching only the root cgroup, against 9.1 MB.
//
// Compared with kubelet v1.37.2 on this machine (cgroup v1, containerd
// 1.6, the same busybox pod on both, 2026-12-03), every family and label
// set kubelet serves for the root, kubepods, QoS, pod, sandbox and
// container cgroups is served alike (TestCadvisorSideBySide in
// examples/fullagent; its pod writes 20 MiB with O_DIRECT to an
// emptyDir, so the block I/O families are compared too: under v1 on Linux
// 6.18 the throttle counters count only below a throttle limit, which the
// test sets, very high, on its cgroup root; without one kubelet serves
// none of them for any cgroup), with these differences. The iocost series
// are tested on a fake v2 tree only (this host is v1). ZFS usage comes
// from statfs, not libzfs.
// container_oom_events_total counts the cgroup's own oom_kill (kubelet counts its OOM watcher's
// events). Not served either, as kubelet does not serve them: the per-CPU
// series and the topology and NUMA machine series.
//
// The pressure series (container_pressure_{cpu,memory,io}_{waiting,
// stalled}_seconds_total: the some and full totals of cpu.pressure,
// memory.pressure and io.pressure, in seconds) are served for every cgroup
// when the hierarchy is cgroup v2 and its root has cpu.pressure, which is
// kubelet v1.37's test (KubeletPSI is GA); a missing file gives zeros, as
// cadvisor. Under cgroup v1 neither agent serves them, even where a hybrid
// /sys/fs/cgroup/unified has pressure files (this machine's case): kubelet
// looks only at /sys/fs/cgroup/cpu.pressure. They are tested against a
// real cgroup in such a unified hierarchy (TestPressureSeriesRealCgroup),
// not beside kubelet, which this machine cannot show them.
//
// Usage:
//
//	c, err := containermetrics.New(containermetrics.Config{Roots: []string{"/kubepods"},
//		Pods: criRuntime, SandboxImage: pause})
//	handler := promhttp.HandlerFor(c.Gatherer(r.Context()), promhttp.HandlerOpts{})
package containermetrics
