// Package allocation owns in-place pod resize on the node: the resources
// allocated to each pod and container (what the node has agreed to give,
// checkpointed under the root dir), the resources actuated (what was last
// applied to the running containers, checkpointed too), the decision
// whether a resize asked for in the pod's spec may be allocated
// (PodResizePending with reason Infeasible or Deferred, as upstream), the
// plan that brings running containers from actuated to allocated (update
// in place or restart, per each container's resizePolicy), its execution
// through small interfaces (a container updater, the pod cgroup) and the
// resize part of the pod status (PodResizePending, PodResizeInProgress,
// containerStatuses[].allocatedResources and .resources), and the events
// upstream records on the pod (Config.Recorder): ResizeDeferred or
// ResizeInfeasible once per pending generation, ResizeStarted when a
// resize is allocated, ResizeCompleted when the containers run at it (none
// for a new pod), ResizeError once per distinct failure, each message
// upstream's "Pod resize ...: " and the JSON of the spec's container
// resources and generation.
//
// Both checkpoints use upstream kubelet's files and format
// (ROOT/allocated_pods_state and ROOT/actuated_pods_state: a JSON object
// with the entries serialised in "data" and upstream's checksum of it), so
// an agent taking over from kubelet keeps its allocations. Each is
// rewritten through a companion file beside it (.allocated_pods_state.swap,
// .actuated_pods_state.swap; fsutil.WriteFileSwap), which then holds the
// previous content: a write per pod start frees no inode, which on ext4
// without a journal slowed the burst's later file and directory creations.
//
// It does not own admission of new pods (package admission), the pod
// cgroup's layout (cgroupmgr) or the container runtime (criruntime): a
// caller hands in an Admitter that decides whether the resized pod fits
// among the others, and the Manager's actuation calls the interfaces
// ContainerUpdater, PodCgroup, SandboxUpdater (the runtime is told a
// pod's new totals before each pod cgroup change, CRI
// UpdatePodSandboxResources, as upstream) and MemoryUsage declared here;
// the status reads the pod cgroup through PodCgroupReader.
//
// Pod-level resources (spec.resources) are resized in place too
// (InPlacePodLevelResourcesVerticalScaling, beta and on in v1.37): the
// pod-level allocation is checkpointed beside the containers', a
// container without a CPU or memory limit of its own is resized to the
// pod-level one it runs with (restarted when its resizePolicy says so),
// and the pod cgroup is grown before and shrunk after the containers. The
// pod's status.allocatedResources and status.resources are written as
// upstream does: a running pod's (one the API server has Running, as
// upstream goes by the pod's API phase) status.resources are read back
// from its cgroup (Config.PodCgroupReader: cpu shares, or the v2 weight converted
// back, as the CPU request; CFS quota as the CPU limit; the memory
// limit), with upstream's rules (the 2m and 10m CPU floors, the allocated
// CPU request kept when the shares differ only by v2's rounding, the
// memory request from the pod's totals when spec.resources has none, a
// value the cgroup lacks kept from the previous Running status; cgroup
// v1's unlimited memory is reported as read, 9007199254740988Ki). Without
// a reader, or for a part that cannot be read, the values last applied
// are shown instead.
//
// Not acted on, and refused as Infeasible rather than accepted: resizes of
// Guaranteed pods' container CPU under the static CPU manager and memory
// under the static memory manager (as upstream with its alpha gates off),
// the removal of pod-level resources, and a pod-level change of anything
// but CPU and memory (the API server refuses both; a pod from a file can
// ask).
//
// Metrics (Config.Metrics, NewMetrics) are kubelet's resize series with
// upstream's names, labels and buckets: requested container resizes
// (counted from pod updates: Metrics is a syncloop.UpdateObserver),
// actuation durations, pending and in-progress resizes, infeasible ones
// by reason_detail (two labels of nodekit's own for the pod-level
// refusals upstream leaves to the API server), and deferred resizes
// accepted later with their wait. A deferred resize's retry_trigger is
// what last queued its retry (another pod left: pods_removed; another
// resize allocated: pod_resized), pod_updated for its own newer
// generation, else periodic_retry: nodekit decides a deferred resize again
// on each sync, where upstream retries on a timer and on those triggers.
package allocation
