// Package cpumanager owns CPU assignment, as upstream kubelet's CPU manager:
// the none and static policies, topology-aware exclusive CPUs for
// Guaranteed containers with integer CPU requests (whole NUMA nodes and
// sockets, then whole cores, then threads, as upstream's takeByTopology;
// policy options full-pcpus-only, distribute-cpus-across-numa and
// strict-cpu-reservation), the reserved CPUs, the shared pool everyone else
// runs on, its checkpoint (<StateDir>/cpu_manager_state, upstream's format,
// so kubelet and a nodekit agent can take over from each other) and the
// reconcile step that pushes shared-pool changes to running containers.
//
// It does not discover pods or containers: the agent tells it which pods
// are active (PodLister) and gives it their statuses (PodStatusGetter). It
// does not talk to a runtime beyond the one call of ResourceUpdater, and
// the runtime side asks CPUSet for a container's cpuset when creating it.
// NUMA alignment with memory and devices is package topology's job: a
// Manager is a topology.HintProvider, or on its own a nodekit.Admitter.
//
//	cpus, err := cpumanager.New(ctx, cpumanager.Config{
//		Policy: cpumanager.PolicyStatic, Topology: machine.CPU,
//		ReservedCPU: resource.MustParse("1"), StateDir: "/var/lib/kubelet",
//		ActivePods: loop, Status: statuses, Runtime: rt,
//	})
//	chain.Add(cpus)                          // or topology.NewManager(cfg, cpus, mem)
//	go cpus.Run(ctx)                         // reconcile every 10s
//	set, ok := cpus.CPUSet(pod.UID, c.Name) // at container creation
package cpumanager
