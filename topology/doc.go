// Package topology owns what the resource managers need to know about the
// machine's layout and how their placements are aligned: the CPU topology
// (threads, cores, sockets, NUMA nodes) and per-NUMA-node memory, read from
// sysfs by Discover or described in a few lines by Synthetic; and the
// topology manager, a nodekit.Admitter that merges the NUMA hints of its
// HintProviders (package cpumanager and memorymanager implement the
// interface) under upstream's policies none, best-effort, restricted and
// single-numa-node, in container or pod scope, rejects misaligned pods with
// TopologyAffinityError, and has every provider Allocate with the merged
// affinity.
//
// It does not allocate anything or keep state: the providers do and
// checkpoint it. It does not know about devices; a device manager would be
// one more HintProvider.
//
//	machine, err := topology.Discover(ctx, topology.HostSysfs())
//	cpus, err := cpumanager.New(ctx, cpumanager.Config{Policy: "static", Topology: machine.CPU, ...})
//	mem, err := memorymanager.New(ctx, memorymanager.Config{Policy: "Static", Machine: machine, ...})
//	tm, err := topology.NewManager(topology.Config{Policy: "single-numa-node", Machine: machine}, cpus, mem)
//	chain := admission.NewChain(tm) // before admission.Builtins, as upstream
package topology
