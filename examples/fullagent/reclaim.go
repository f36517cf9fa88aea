package main

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/events"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/gc"
	"github.com/nodekit/nodekit/pullrecords"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

// reclaim is what keeps the node's disk, memory and PIDs in check: the
// container and image garbage collectors and the eviction manager.
type reclaim struct {
	containers *gc.ContainerGC
	images     *gc.ImageGC
	eviction   *eviction.Manager
}

// defaultEvictionHard is upstream's evictionHard when the configuration
// gives none.
var defaultEvictionHard = map[string]string{
	"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
	"imagefs.available": "15%", "imagefs.inodesFree": "5%",
}

// evictionThresholds parses the eviction fields of the configuration, with
// upstream's default hard thresholds when evictionHard is absent.
func evictionThresholds(cfg *kubeletv1beta1.KubeletConfiguration) ([]eviction.Threshold, error) {
	hard := cfg.EvictionHard
	if hard == nil {
		hard = defaultEvictionHard
	}
	return eviction.ParseThresholds(eviction.ThresholdConfig{
		Hard: hard, Soft: cfg.EvictionSoft, SoftGracePeriod: cfg.EvictionSoftGracePeriod, MinimumReclaim: cfg.EvictionMinimumReclaim,
	})
}

// newReclaim wires garbage collection and eviction to the runtime, the
// stats provider and the loop's pod store (through which the loop kills
// evicted pods and says what of a pod may be removed).
func (a *agent) newReclaim(ctx context.Context, o *options, recorder *events.Recorder) (*reclaim, error) {
	cfg := a.cfg
	pods := a.pods
	r := &reclaim{}
	var err error
	if o.containerGCPeriod <= 0 {
		o.containerGCPeriod = time.Minute
	}
	r.containers, err = gc.NewContainerGC(gc.ContainerGCConfig{
		Policy:       gc.ContainerPolicy{MinAge: o.minContainerTTL, MaxPerPodContainer: o.maxDeadPerContainer, MaxContainers: o.maxDeadContainers},
		PodLogsDir:   cfg.PodLogsDir,
		Period:       o.containerGCPeriod,
		SourcesReady: pods.SourcesReady, TracerProvider: a.tracer,
	}, a.runtime, pods)
	if err != nil {
		return nil, err
	}
	nodeRef := &v1.ObjectReference{Kind: "Node", Name: a.nodeName, UID: types.UID(a.nodeName)}
	var pinned []string
	if img, err := a.runtime.SandboxImage(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to read the runtime's sandbox image; it is not pinned against image GC")
	} else if img != "" {
		pinned = append(pinned, img)
	}
	r.images, err = gc.NewImageGC(gc.ImageGCConfig{
		Policy: gc.ImagePolicy{
			HighThresholdPercent: int(*cfg.ImageGCHighThresholdPercent), LowThresholdPercent: int(*cfg.ImageGCLowThresholdPercent),
			MinAge: cfg.ImageMinimumGCAge.Duration, MaxAge: cfg.ImageMaximumGCAge.Duration,
		},
		PinnedImages: pinned, Events: recorder, NodeRef: nodeRef, Records: imageRecords(a.pullRecords), Period: o.imageGCPeriod,
		TracerProvider: a.tracer,
	}, a.runtime, a.runtime, a.stats)
	if err != nil {
		return nil, fmt.Errorf("imageGC: %w", err)
	}
	ths, err := evictionThresholds(cfg)
	if err != nil {
		return nil, err
	}
	dedicated, err := a.stats.HasDedicatedImageFs(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to tell whether images have a filesystem of their own; assuming not")
	}
	r.eviction, err = eviction.New(eviction.Config{
		Thresholds:                    ths,
		PressureTransitionPeriod:      cfg.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriodSeconds:      int64(cfg.EvictionMaxPodGracePeriod),
		LocalStorageCapacityIsolation: *cfg.LocalStorageCapacityIsolation,
		DedicatedImageFs:              dedicated,
		Stats:                         a.stats,
		Pods:                          eviction.PodListerFunc(func(context.Context) []*v1.Pod { return pods.ActivePods() }),
		Killer:                        eviction.PodKillerFunc(pods.KillPod),
		ImageGC:                       r.images,
		ContainerGC:                   r.containers,
		Cleanup:                       eviction.CleanupFunc(pods.PodCleanedUp),
		Events:                        recorder,
		NodeRef:                       nodeRef,
		Metrics:                       a.metrics,
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// conditions are the node's pressure conditions, as the eviction manager
// sees them.
func (r *reclaim) conditions() map[v1.NodeConditionType]statusmgr.ConditionProvider {
	out := map[v1.NodeConditionType]statusmgr.ConditionProvider{}
	for _, t := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		out[t] = statusmgr.PressureCondition(t, r.eviction.PressureFunc(t))
	}
	return out
}

// run starts the three loops.
func (r *reclaim) run(start func(string, func(context.Context) error)) {
	start("container GC", r.containers.Run)
	start("image GC", r.images.Run)
	start("eviction", r.eviction.Run)
}

var _ gc.PodStateProvider = (*syncloop.PodStore)(nil)

// Image GC counts the images of image volumes as in use.
var _ gc.MountedImageLister = (*criruntime.Runtime)(nil)

// imageRecords is the pull records image GC prunes; nil (not a nil
// pointer in an interface) when they are off.
func imageRecords(v *pullrecords.Verifier) gc.RecordPruner {
	if v == nil {
		return nil
	}
	return v
}
