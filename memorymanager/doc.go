// Package memorymanager owns NUMA memory and huge page assignment for
// Guaranteed pods, as upstream kubelet's memory manager: policies None and
// Static, per-NUMA-node accounting of memory and every huge page size minus
// the reserved memory (reservedMemory), blocks spread over as few NUMA
// nodes as the request needs (never mixing single- and cross-node
// allocations on a node), reuse of init containers' memory, its checkpoint
// (<StateDir>/memory_manager_state, upstream's format) and admission.
//
// It does not enforce limits or move memory: the runtime does, from the
// NUMA nodes CPUSetMems gives for a container (cpuset.mems). It does not
// discover pods: the agent says which are active (PodLister). NUMA
// alignment with CPUs is package topology's job: a Manager is a
// topology.HintProvider, or on its own a nodekit.Admitter.
//
//	mem, err := memorymanager.New(ctx, memorymanager.Config{
//		Policy: memorymanager.PolicyStatic, Machine: machine,
//		ReservedMemory: cfg.ReservedMemory, StateDir: "/var/lib/kubelet",
//		ActivePods: loop,
//	})
//	tm, err := topology.NewManager(topology.Config{Policy: "single-numa-node", Machine: machine}, cpus, mem)
//	mems, ok := mem.CPUSetMems(pod.UID, c.Name) // at container creation
package memorymanager
