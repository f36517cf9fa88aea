// Package eviction owns node-pressure eviction: the six signals
// (memory.available, nodefs.available, nodefs.inodesFree, imagefs.available,
// imagefs.inodesFree, pid.available), hard and soft thresholds parsed from
// the upstream KubeletConfiguration syntax, grace and pressure-transition
// periods, ranking of pods per signal, local-storage limit eviction, the
// MemoryPressure/DiskPressure/PIDPressure conditions and an Admitter that
// refuses pods the node cannot take under pressure.
//
// The decisions are pure functions of (stats, pods, time): Observe,
// ThresholdsMet, Evaluate, Rank, LocalStorageViolation, AdmitUnderPressure.
// Manager strings them together: Synchronize(ctx) is one step, Run(ctx)
// repeats it. It does not collect stats (package stats does), delete images
// or containers (package gc does, behind Reclaimer) or kill pods itself
// (PodKiller does).
//
// Where it differs from upstream: upstream reads every pod's stats on
// every step. When the stats provider can give the node's stats alone
// (NodeSummaryProvider; package stats can), a step reads only those unless
// an active pod has a local-storage limit, and reads the pods' stats when a
// threshold calls for ranking them. The decisions are the same: a pod
// without such a limit is never evicted for its local storage, and every
// other use of a pod's stats is in ranking. At 1000 pods the pods' stats
// were the largest allocation of a step (8.5 MB in flight when the
// collector ran), read every 10 s to decide nothing.
//
// Usage:
//
//	ths, err := eviction.ParseThresholds(eviction.ThresholdConfig{Hard: cfg.EvictionHard, ...})
//	m, err := eviction.New(eviction.Config{Thresholds: ths, Stats: statsProvider,
//		Pods: activePods, Killer: killer, ImageGC: imageGC, ContainerGC: containerGC})
//	chain.Add(m)                                  // admission
//	statusmgr.PressureCondition(v1.NodeDiskPressure, m.PressureFunc(v1.NodeDiskPressure))
//	go m.Run(ctx)
package eviction
