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
// Usage:
//
//	ths, err := eviction.ParseThresholds(eviction.ThresholdConfig{Hard: cfg.EvictionHard, ...})
//	m, err := eviction.New(eviction.Config{Thresholds: ths, Stats: statsProvider,
//		Pods: activePods, Killer: killer, ImageGC: imageGC, ContainerGC: containerGC})
//	chain.Add(m)                                  // admission
//	statusmgr.PressureCondition(v1.NodeDiskPressure, m.PressureFunc(v1.NodeDiskPressure))
//	go m.Run(ctx)
package eviction
