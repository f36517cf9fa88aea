package main

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/allocation"
	"github.com/nodekit/nodekit/cgroupmgr"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

// podCgroups is the kubepods tree: a cgroup per pod under its QoS tier,
// created before the sandbox, removed once the pod is gone, and the
// containers' OOM score by QoS class. Nil manager: cgroupsPerQOS is off.
type podCgroups struct {
	m           *cgroupmgr.Manager
	memCapacity int64
}

// newPodCgroups builds the cgroup manager from cgroupDriver, cgroupRoot,
// cgroupsPerQOS, enforceNodeAllocatable, the reservations, cpuCFSQuota and
// podPidsLimit; the systemd driver finds systemd on systemBus ("" is the
// system bus); metrics get the cgroup operation durations.
func newPodCgroups(ctx context.Context, cfg *kubeletv1beta1.KubeletConfiguration, machine statusmgr.MachineInfo, systemBus string, metrics cgroupmgr.OperationObserver) (*podCgroups, error) {
	m, err := machine.Machine(ctx)
	if err != nil {
		return nil, fmt.Errorf("machine info: %w", err)
	}
	pc := &podCgroups{memCapacity: int64(m.MemoryBytes)}
	if !*cfg.CgroupsPerQOS {
		return pc, nil
	}
	capacity := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(m.NumCores), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(int64(m.MemoryBytes), resource.BinarySI),
	}
	// As upstream's internal capacity: kubepods' pids.max is the node's
	// task limit (less the pid reservations); none when it cannot be read.
	if n, err := cgroupmgr.MaxPIDs("/proc/sys"); err == nil {
		capacity[cgroupmgr.ResourcePID] = *resource.NewQuantity(n, resource.DecimalSI)
	} else {
		klog.FromContext(ctx).V(2).Info("No pid capacity for kubepods", "err", err)
	}
	list := func(in map[string]string) v1.ResourceList {
		out := v1.ResourceList{}
		for k, v := range in {
			out[v1.ResourceName(k)] = resource.MustParse(v) // validated by loadConfig
		}
		return out
	}
	qosReserved := map[v1.ResourceName]int64{}
	for k, v := range cfg.QOSReserved {
		var pct int64
		if _, err := fmt.Sscanf(v, "%d%%", &pct); err != nil || pct < 0 || pct > 100 {
			return nil, fmt.Errorf("qosReserved[%s]: %q is not a percentage", k, v)
		}
		qosReserved[v1.ResourceName(k)] = pct
	}
	var period time.Duration
	if cfg.CPUCFSQuotaPeriod != nil {
		period = cfg.CPUCFSQuotaPeriod.Duration
	}
	pc.m, err = cgroupmgr.New(cgroupmgr.Config{
		Driver: cfg.CgroupDriver, CgroupRoot: cfg.CgroupRoot, CgroupsPerQOS: true,
		EnforceNodeAllocatable: cfg.EnforceNodeAllocatable, Capacity: capacity,
		KubeReserved: list(cfg.KubeReserved), SystemReserved: list(cfg.SystemReserved),
		KubeReservedCgroup: cfg.KubeReservedCgroup, SystemReservedCgroup: cfg.SystemReservedCgroup,
		QOSReserved: qosReserved, DisableCPUCFSQuota: !*cfg.CPUCFSQuota, CPUCFSQuotaPeriod: period,
		PodPidsLimit: *cfg.PodPidsLimit, SystemdBus: systemBus, Metrics: metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	return pc, nil
}

// statsCgroups locates pod cgroups for the Summary's pressure blocks:
// the pod from the store, its cgroup path from the manager. Nil without
// cgroupsPerQOS (no pod cgroups).
func (pc *podCgroups) statsCgroups(pods *syncloop.PodStore) stats.PodCgroups {
	if pc == nil || pc.m == nil {
		return nil
	}
	return podCgroupLocator{m: pc.m, pods: pods}
}

type podCgroupLocator struct {
	m    *cgroupmgr.Manager
	pods *syncloop.PodStore
}

func (l podCgroupLocator) PodCgroup(uid types.UID) (string, bool) {
	pod, ok := l.pods.GetPodByUID(uid)
	if !ok {
		return "", false
	}
	path, err := l.m.PodCgroupPath(pod)
	return path, err == nil
}

// start creates kubepods and the QoS tiers.
func (pc *podCgroups) start(ctx context.Context) error {
	if pc.m == nil {
		return nil
	}
	if err := pc.m.Start(ctx); err != nil {
		return fmt.Errorf("cgroups (cgroupRoot, cgroupDriver): %w", err)
	}
	return nil
}

// sandbox puts the pod's cgroup into its sandbox options, creating it when
// it does not exist. As upstream's SyncPod, a pod whose cgroup does not
// exist yet first has the QoS tiers sized to the active pods (active,
// which include it), so the burstable tier's shares count a new burstable
// pod before it runs; unlike upstream, a start that changes no size
// (EnsureQOS) writes nothing, and step's UpdateQOS every 10 s writes
// every tier again (upstream: every minute). An existing pod cgroup is
// left as it is, as upstream's EnsureExists leaves it: its limits change only through the
// in-place resize (package allocation), which checks a memory decrease
// against the pod's usage first and orders the writes against the
// containers'; writing the allocation here, before a container starts,
// would skip both.
func (pc *podCgroups) sandbox(active func() []*v1.Pod, next func(context.Context, *v1.Pod) (nodekit.SandboxOptions, error)) func(context.Context, *v1.Pod) (nodekit.SandboxOptions, error) {
	return func(ctx context.Context, pod *v1.Pod) (nodekit.SandboxOptions, error) {
		o, err := next(ctx, pod)
		if err != nil || pc.m == nil {
			return o, err
		}
		ok, err := pc.m.PodCgroupExists(ctx, pod)
		if err == nil && ok {
			if o.CgroupParent, err = pc.m.PodCgroupParent(pod); err != nil {
				return o, fmt.Errorf("pod cgroup: %w", err)
			}
			return o, nil
		}
		if err == nil && !ok {
			if err := pc.m.EnsureQOS(ctx, active()); err != nil {
				klog.FromContext(ctx).V(2).Info("Failed to update QoS cgroups while syncing pod", "pod", klog.KObj(pod), "err", err)
			}
		}
		parent, err := pc.m.EnsurePod(ctx, pod)
		if err != nil {
			return o, fmt.Errorf("pod cgroup: %w", err)
		}
		o.CgroupParent = parent
		return o, nil
	}
}

// options adds the container's OOM score adjustment.
func (pc *podCgroups) options(next nodekit.ContainerOptionsFunc) nodekit.ContainerOptionsFunc {
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*nodekit.ContainerOptions, error) {
		o, err := next(ctx, pod, c, podIPs)
		if err != nil || o == nil {
			return o, err
		}
		adj := cgroupmgr.OOMScoreAdj(pod, c, pc.memCapacity)
		o.OOMScoreAdj = &adj
		return o, nil
	}
}

// cgroupPods is what cleanup needs of the agent: which pods may still
// have processes, and the per-pod state to drop with the pods that do not.
type cgroupPods interface {
	// keep returns the UIDs of pods not yet cleaned up or still running
	// in the runtime, and whether every source has been seen.
	keep(ctx context.Context) (map[types.UID]bool, []*v1.Pod, bool)
	// forgetClasses drops the runtime handlers of pods not in keep.
	forgetClasses(keep map[types.UID]bool)
	// forgetResizes drops the resize allocations of pods not in keep.
	forgetResizes(ctx context.Context, keep map[types.UID]bool)
}

// podLister lists the pods the runtime runs.
type podLister interface {
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
}

// cgroupKeeper is cgroupPods over the parts that know the pods: the
// loop's pod store, the runtime, the runtime classes and the in-place
// resize allocations (nil when off).
type cgroupKeeper struct {
	pods    *syncloop.PodStore
	runtime podLister
	classes *runtimeClasses
	resizer *allocation.Manager
}

var _ cgroupPods = cgroupKeeper{}

// step reconciles the QoS tiers and removes the cgroups of pods that are
// gone.
func (pc *podCgroups) step(ctx context.Context, pods cgroupPods) {
	logger := klog.FromContext(ctx)
	keep, active, ready := pods.keep(ctx)
	if !ready {
		return
	}
	pods.forgetClasses(keep)
	pods.forgetResizes(ctx, keep)
	if pc.m == nil {
		return
	}
	if err := pc.m.UpdateQOS(ctx, active); err != nil {
		logger.Error(err, "Unable to update the QoS cgroups")
	}
	uids, err := pc.m.ListPodCgroups(ctx)
	if err != nil {
		logger.Error(err, "Unable to list pod cgroups")
		return
	}
	for _, uid := range uids {
		if keep[uid] {
			continue
		}
		if err := pc.m.DestroyPod(ctx, uid); err != nil {
			logger.Error(err, "Unable to remove an orphaned pod cgroup", "podUID", uid)
			continue
		}
		logger.V(2).Info("Removed the cgroup of a pod that is gone", "podUID", uid)
	}
}

// run calls step every 10 s.
func (pc *podCgroups) run(ctx context.Context, pods cgroupPods) error {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			pc.step(ctx, pods)
		}
	}
}

// keep implements cgroupPods.
func (k cgroupKeeper) keep(ctx context.Context) (map[types.UID]bool, []*v1.Pod, bool) {
	if !k.pods.SourcesReady() {
		return nil, nil, false
	}
	running, err := k.runtime.ListPods(ctx, false)
	if err != nil {
		return nil, nil, false // never remove blind
	}
	keep := map[types.UID]bool{}
	for _, p := range running {
		keep[p.ID] = true
	}
	for _, p := range k.pods.Pods() {
		if !k.pods.PodCleanedUp(ctx, p) {
			keep[p.UID] = true
		}
	}
	return keep, k.pods.ActivePods(), true
}

// forgetClasses drops the runtime handlers of gone pods.
func (k cgroupKeeper) forgetClasses(keep map[types.UID]bool) { k.classes.forget(keep) }

// forgetResizes drops the allocations of pods no longer kept (those that
// left while the agent was down; the loop forgets the others itself).
func (k cgroupKeeper) forgetResizes(ctx context.Context, keep map[types.UID]bool) {
	if k.resizer == nil {
		return
	}
	if err := k.resizer.RemoveOrphans(keep); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to drop the allocations of pods that are gone")
	}
}
