package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// ContainerPolicy bounds the dead containers kept, as upstream's
// --minimum-container-ttl-duration, --maximum-dead-containers-per-container
// and --maximum-dead-containers.
type ContainerPolicy struct {
	// MinAge: a dead container younger than this (by creation time) is
	// never removed. Default (0) removes at once.
	MinAge time.Duration
	// MaxPerPodContainer is how many dead instances of one container of
	// one pod to keep; negative means no limit. Upstream default 1.
	MaxPerPodContainer int
	// MaxContainers is how many dead containers to keep on the node;
	// negative means no limit. Upstream default -1.
	MaxContainers int
}

// PodStateProvider says what may be removed of a pod the runtime still
// has (syncloop's pod workers know).
type PodStateProvider interface {
	// ShouldPodContentBeRemoved: the pod is deleted (or evicted) and
	// terminated, or unknown to the agent; its containers, sandboxes and
	// logs can all go.
	ShouldPodContentBeRemoved(uid types.UID) bool
	// ShouldPodRuntimeBeRemoved: the pod is terminated; its containers can
	// go even though the API object stays.
	ShouldPodRuntimeBeRemoved(uid types.UID) bool
}

// ContainerPlan is what one container GC pass removes.
type ContainerPlan struct {
	Containers []nodekit.ContainerID
	Sandboxes  []string
}

type deadContainer struct {
	id      nodekit.ContainerID
	created time.Time
}

type unitKey struct {
	uid  types.UID
	name string
}

// PlanContainerGC decides, from the runtime's pods (ListPods with all) at
// time now, which dead containers and sandboxes to remove, as upstream's
// container GC:
//
//   - containers not running and created at least MinAge ago are
//     candidates, grouped by (pod UID, container name);
//   - when allSourcesReady, every candidate of a pod whose content may be
//     removed (or, with evictNonDeleted, whose runtime may be removed) goes;
//   - each group keeps its MaxPerPodContainer newest;
//   - over MaxContainers in all, groups are cut evenly to
//     MaxContainers/groups, but never below their newest dead instance,
//     since the pod may still be asked for its logs --previous (upstream
//     would then remove the oldest of those too);
//   - a sandbox that is not ready goes when its pod's content may be
//     removed (and none of its containers stay), and otherwise every
//     sandbox but the newest of a pod goes when it is not ready.
//
// Removal order within the plan: oldest first. The result is sorted.
func PlanContainerGC(now time.Time, p ContainerPolicy, pods []*nodekit.Pod, state PodStateProvider, allSourcesReady, evictNonDeleted bool) ContainerPlan {
	var plan ContainerPlan
	units := map[unitKey][]deadContainer{}
	removable := func(uid types.UID) bool {
		return state != nil && (state.ShouldPodContentBeRemoved(uid) || (evictNonDeleted && state.ShouldPodRuntimeBeRemoved(uid)))
	}
	remaining := map[types.UID]int{} // containers that stay, per pod
	for _, pod := range pods {
		for _, c := range pod.Containers {
			if c.State == nodekit.StateRunning || now.Sub(c.CreatedAt) < p.MinAge {
				remaining[pod.ID]++
				continue
			}
			if allSourcesReady && removable(pod.ID) {
				plan.Containers = append(plan.Containers, c.ID)
				continue
			}
			k := unitKey{pod.ID, c.Name}
			units[k] = append(units[k], deadContainer{c.ID, c.CreatedAt})
		}
	}
	for k := range units {
		slices.SortStableFunc(units[k], func(a, b deadContainer) int { return b.created.Compare(a.created) }) // newest first
	}
	trim := func(keep int) {
		for k, u := range units {
			if len(u) > keep {
				for _, c := range u[keep:] {
					plan.Containers = append(plan.Containers, c.id)
				}
				units[k] = u[:keep]
			}
		}
	}
	if p.MaxPerPodContainer >= 0 {
		trim(p.MaxPerPodContainer)
	}
	total := 0
	for _, u := range units {
		total += len(u)
	}
	if p.MaxContainers >= 0 && total > p.MaxContainers && len(units) > 0 {
		// Cutting every unit evenly to floor(MaxContainers/units) leaves at
		// most MaxContainers; when there are more units than that, each
		// keeps one (its newest), which upstream would then remove oldest
		// first. We keep it: the pod may still be asked for --previous logs.
		trim(max(1, p.MaxContainers/len(units)))
	}
	for k, u := range units {
		remaining[k.uid] += len(u)
	}
	for _, pod := range pods {
		sbs := slices.Clone(pod.Sandboxes)
		slices.SortStableFunc(sbs, func(a, b *nodekit.Container) int { return b.CreatedAt.Compare(a.CreatedAt) })
		gone := removable(pod.ID) && remaining[pod.ID] == 0
		for i, sb := range sbs {
			if sb.State == nodekit.StateRunning {
				continue
			}
			if gone || i > 0 {
				plan.Sandboxes = append(plan.Sandboxes, sb.ID.ID)
			}
		}
	}
	slices.SortFunc(plan.Containers, func(a, b nodekit.ContainerID) int { return cmp.Compare(a.ID, b.ID) })
	slices.Sort(plan.Sandboxes)
	return plan
}

// PlanLogDirs returns the entries of the pod logs directory
// (NAMESPACE_NAME_UID) whose pod's content may be removed.
func PlanLogDirs(names []string, state PodStateProvider) []string {
	var out []string
	for _, n := range names {
		i := strings.LastIndexByte(n, '_')
		if i < 0 || i == len(n)-1 {
			continue
		}
		if state.ShouldPodContentBeRemoved(types.UID(n[i+1:])) {
			out = append(out, n)
		}
	}
	return out
}

// ContainerRuntime is what container GC needs of the runtime;
// criruntime.Runtime satisfies it.
type ContainerRuntime interface {
	// ListPods with all=true lists every container and sandbox.
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
	// RemoveContainer removes a container (a running one is forcibly
	// stopped first, as CRI specifies).
	RemoveContainer(ctx context.Context, id nodekit.ContainerID) error
	// RemovePodSandbox removes a sandbox and what containers remain in it.
	RemovePodSandbox(ctx context.Context, id string) error
}

// SourcesReady reports whether every pod source has been seen, so an
// unknown pod really is gone. Nil means always ready.
type SourcesReady func() bool

// ContainerGCConfig configures a ContainerGC.
type ContainerGCConfig struct {
	Policy ContainerPolicy
	// PodLogsDir is where the pod log directories live. "" skips log
	// cleanup. Upstream: /var/log/pods.
	PodLogsDir string
	// Period between passes in Run. Default 1m, as upstream.
	Period       time.Duration
	SourcesReady SourcesReady
	Clock        clock.WithTicker
	// TracerProvider, when set, traces each GarbageCollect (and so each
	// Reclaim) in a span named as upstream's, Containers/GarbageCollect;
	// the runtime calls of the pass run under it. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// ContainerGC removes dead containers, dead sandboxes and the log
// directories of gone pods.
type ContainerGC struct {
	cfg    ContainerGCConfig
	rt     ContainerRuntime
	state  PodStateProvider
	tracer trace.Tracer
}

// NewContainerGC returns a container GC over rt; state must not be nil.
func NewContainerGC(cfg ContainerGCConfig, rt ContainerRuntime, state PodStateProvider) (*ContainerGC, error) {
	if rt == nil || state == nil {
		return nil, errors.New("gc: NewContainerGC needs a runtime and a pod state provider")
	}
	if cfg.Period == 0 {
		cfg.Period = time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &ContainerGC{cfg: cfg, rt: rt, state: state, tracer: tracerOf(cfg.TracerProvider)}, nil
}

// GarbageCollect is one pass: plan from the runtime's pods, remove the
// containers and sandboxes, then the log directories of gone pods. With
// evictNonDeleted, the containers of terminated pods go too. It blocks on
// the runtime and returns the errors joined; a failed removal does not
// stop the others.
func (g *ContainerGC) GarbageCollect(ctx context.Context, evictNonDeleted bool) error {
	ctx, span := g.tracer.Start(ctx, containerGCSpan)
	defer span.End()
	logger := klog.FromContext(ctx)
	pods, err := g.rt.ListPods(ctx, true)
	if err != nil {
		return fmt.Errorf("gc: list pods: %w", err)
	}
	ready := g.cfg.SourcesReady == nil || g.cfg.SourcesReady()
	plan := PlanContainerGC(g.cfg.Clock.Now(), g.cfg.Policy, pods, g.state, ready, evictNonDeleted)
	var errs []error
	for _, id := range plan.Containers {
		logger.V(4).Info("Removing dead container", "containerID", id)
		if err := g.rt.RemoveContainer(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range plan.Sandboxes {
		logger.V(4).Info("Removing dead sandbox", "sandboxID", id)
		if err := g.rt.RemovePodSandbox(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if g.cfg.PodLogsDir != "" && ready {
		entries, err := os.ReadDir(g.cfg.PodLogsDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("gc: read pod logs dir: %w", err))
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		for _, n := range PlanLogDirs(names, g.state) {
			logger.V(4).Info("Removing pod logs", "dir", n)
			if err := os.RemoveAll(filepath.Join(g.cfg.PodLogsDir, n)); err != nil {
				errs = append(errs, fmt.Errorf("gc: remove pod logs: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// Reclaim removes every dead container it may, including those of
// terminated pods; it is the eviction manager's "delete all unused
// containers" step.
func (g *ContainerGC) Reclaim(ctx context.Context) error {
	return g.GarbageCollect(ctx, true)
}

// Run calls GarbageCollect every Period until ctx is done, logging errors.
func (g *ContainerGC) Run(ctx context.Context) error {
	t := g.cfg.Clock.NewTicker(g.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
			if err := g.GarbageCollect(ctx, false); err != nil {
				klog.FromContext(ctx).Error(err, "Container garbage collection failed")
			}
		}
	}
}
