// Package gc owns garbage collection on the node: dead containers and
// sandboxes (minimum age, maximum dead instances per container and in
// total, everything of deleted pods), the log directories of gone pods,
// and unused images (age, high/low disk-use thresholds; images in use,
// by a container or, with a PodLister that has MountedImageLister, as an
// image volume, pinned by the runtime or configured as pinned, such as the
// sandbox image, are never removed).
//
// Decisions are pure functions: PlanContainerGC, PlanLogDirs,
// EvictionOrder, PlanImageGC, FreeSpace. ContainerGC and ImageGC execute
// them through small interfaces (ContainerRuntime, ImageService,
// PodLister, ImageFsStats) with a GarbageCollect step, a Run loop and a
// Reclaim method the eviction manager calls under disk pressure. After
// each image pass a RecordPruner (the image pull records), when given,
// is told which images are left, as upstream's post-GC hook. With a
// TracerProvider in their Config, each container GC pass (Reclaim
// included) and each image GarbageCollect is a span named as upstream
// kubelet's, Containers/GarbageCollect and Images/GarbageCollect, with the
// runtime calls of the pass under it (image Reclaim has none, as
// upstream's DeleteUnusedImages).
//
// It does not decide pod lifecycle: it only removes what is already dead,
// and asks a PodStateProvider whether a pod's content may go.
//
// Usage:
//
//	cgc, _ := gc.NewContainerGC(gc.ContainerGCConfig{Policy: gc.ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
//		PodLogsDir: "/var/log/pods"}, runtime, podStates)
//	igc, _ := gc.NewImageGC(gc.ImageGCConfig{Policy: gc.ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80},
//		PinnedImages: []string{"registry.k8s.io/pause:3.10"}}, runtime, runtime, statsProvider)
//	go cgc.Run(ctx)
//	go igc.Run(ctx)
package gc
