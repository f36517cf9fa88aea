package gc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// ImagePolicy is upstream's image GC policy (KubeletConfiguration
// imageGCHighThresholdPercent, imageGCLowThresholdPercent,
// imageMinimumGCAge, imageMaximumGCAge).
type ImagePolicy struct {
	// HighThresholdPercent of imagefs use starts a pass; it frees down to
	// LowThresholdPercent. Upstream defaults 85 and 80.
	HighThresholdPercent, LowThresholdPercent int
	// Both zero means the upstream defaults.
	// MinAge: an image seen for less than this is never removed (upstream
	// default imageMinimumGCAge 2m; 0 here means no minimum).
	MinAge time.Duration
	// MaxAge: an image unused for longer is removed whatever the disk use;
	// 0 disables.
	MaxAge time.Duration
}

// Validate checks the thresholds as upstream does.
func (p ImagePolicy) Validate() error {
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		return fmt.Errorf("gc: imageGCHighThresholdPercent %d must be in [0, 100]", p.HighThresholdPercent)
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		return fmt.Errorf("gc: imageGCLowThresholdPercent %d must be in [0, 100]", p.LowThresholdPercent)
	}
	if p.LowThresholdPercent > p.HighThresholdPercent {
		return fmt.Errorf("gc: imageGCLowThresholdPercent %d must not exceed imageGCHighThresholdPercent %d", p.LowThresholdPercent, p.HighThresholdPercent)
	}
	if p.MaxAge != 0 && p.MaxAge < p.MinAge {
		return fmt.Errorf("gc: imageMaximumGCAge %v must not be less than imageMinimumGCAge %v", p.MaxAge, p.MinAge)
	}
	return nil
}

// ImageRecord is what image GC knows of one image.
type ImageRecord struct {
	ID string
	// Names are the image's tags and digests, matched against pinned
	// images.
	Names []string
	Size  int64
	// Pinned by the runtime (CRI Image.pinned) or by configuration (the
	// sandbox image): never removed.
	Pinned bool
	// InUse by a container of any pod the runtime has (running or not).
	InUse bool
	// FirstDetected is when GC first saw the image; LastUsed when it last
	// saw it in use (FirstDetected if never).
	FirstDetected, LastUsed time.Time
}

// ImagePlan is what one image GC pass removes.
type ImagePlan struct {
	// ByAge are images unused for longer than MaxAge.
	ByAge []string
	// BySpace are images removed to get below the low threshold, least
	// recently used first.
	BySpace []string
	// BytesToFree is what BySpace aims for (0 below the high threshold);
	// BytesFreed what it reaches.
	BytesToFree, BytesFreed int64
}

// EvictionOrder returns the images GC may remove (neither in use nor
// pinned), least recently used first, then first detected first.
func EvictionOrder(images []ImageRecord) []ImageRecord {
	var out []ImageRecord
	for _, im := range images {
		if !im.InUse && !im.Pinned {
			out = append(out, im)
		}
	}
	slices.SortStableFunc(out, func(a, b ImageRecord) int {
		if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
			return c
		}
		return a.FirstDetected.Compare(b.FirstDetected)
	})
	return out
}

// PlanImageGC decides, at now, which images to remove. began is when GC
// started watching (age-based removal waits until MaxAge has passed since
// then, so a restart does not remove everything). capacity and available
// describe the image filesystem. Images unused for more than MaxAge go
// first; then, when use is at or above HighThresholdPercent, images at
// least MinAge old go in eviction order until use is back at
// LowThresholdPercent. It errors on a zero capacity.
func PlanImageGC(p ImagePolicy, now, began time.Time, images []ImageRecord, capacity, available int64) (ImagePlan, error) {
	var plan ImagePlan
	order := EvictionOrder(images)
	if p.MaxAge > 0 && now.Sub(began) > p.MaxAge {
		kept := order[:0:0]
		for _, im := range order {
			if now.Sub(im.LastUsed) > p.MaxAge {
				plan.ByAge = append(plan.ByAge, im.ID)
				continue
			}
			kept = append(kept, im)
		}
		order = kept
	}
	if capacity <= 0 {
		return plan, errors.New("gc: invalid capacity 0 on image filesystem")
	}
	available = min(available, capacity)
	usage := 100 - int(available*100/capacity)
	if usage < p.HighThresholdPercent {
		return plan, nil
	}
	plan.BytesToFree = capacity*int64(100-p.LowThresholdPercent)/100 - available
	plan.BySpace, plan.BytesFreed = FreeSpace(p.MinAge, now, order, plan.BytesToFree)
	return plan, nil
}

// FreeSpace picks, from images in eviction order, those at least minAge
// old until their sizes reach bytesToFree.
func FreeSpace(minAge time.Duration, now time.Time, order []ImageRecord, bytesToFree int64) ([]string, int64) {
	var ids []string
	var freed int64
	for _, im := range order {
		if freed >= bytesToFree {
			break
		}
		if im.InUse || im.Pinned || now.Sub(im.FirstDetected) < minAge {
			continue
		}
		ids = append(ids, im.ID)
		freed += im.Size
	}
	return ids, freed
}

// ImageService lists and removes images; criruntime.Runtime satisfies it.
type ImageService interface {
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, id string) error
}

// PodLister lists the runtime's pods, for the images their containers
// use; criruntime.Runtime satisfies it.
type PodLister interface {
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
}

// MountedImageLister is an optional capability of the PodLister: the IDs
// of the images a container mounts as image volumes (volumes[].image).
// With it those images count as in use, as upstream (which reads them from
// CRI ContainerStatus mounts); criruntime.Runtime has it. Without it only
// containers' own images do.
type MountedImageLister interface {
	MountedImages(ctx context.Context, id nodekit.ContainerID) ([]string, error)
}

// ImageFsStats reads the image filesystem's capacity and availability;
// stats.Provider satisfies it.
type ImageFsStats interface {
	ImageFs(ctx context.Context) (*statsapi.FsStats, error)
}

// EventRecorder records events; client-go's record.EventRecorder fits.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// RecordPruner forgets what is kept about images that are gone: the
// image pull records (pullrecords.Verifier satisfies it). present are
// the IDs of the images still on the node; what was updated at or after
// until (the start of the pass) stays, as it may be about an image that
// arrived during the pass.
type RecordPruner interface {
	Prune(ctx context.Context, present []string, until time.Time)
}

// ImageGCConfig configures an ImageGC.
type ImageGCConfig struct {
	Policy ImagePolicy
	// PinnedImages are never removed, matched by ID, tag or digest: the
	// sandbox (pause) image belongs here.
	PinnedImages []string
	// Period between passes in Run. Default 5m, as upstream.
	Period time.Duration
	// Events gets FreeDiskSpaceFailed and InvalidDiskCapacity on NodeRef.
	Events  EventRecorder
	NodeRef *v1.ObjectReference
	Clock   clock.WithTicker
	// Records, if set, is pruned after every pass (GarbageCollect,
	// Reclaim) that listed the images: upstream's post-GC hook, which
	// removes the pull records of the images no longer on the node. It
	// is given every image the pass found and did not remove.
	Records RecordPruner
	// TracerProvider, when set, traces each GarbageCollect in a span
	// named as upstream's, Images/GarbageCollect; the runtime calls of
	// the pass run under it. Reclaim is not traced, as upstream's
	// DeleteUnusedImages. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// ImageGC removes unused images by age and by disk-use thresholds. It
// remembers when it first saw each image and when it last saw it in use.
type ImageGC struct {
	cfg    ImageGCConfig
	images ImageService
	pods   PodLister
	fs     ImageFsStats
	began  time.Time
	tracer trace.Tracer

	mu      sync.Mutex
	records map[string]*ImageRecord
}

// NewImageGC returns an image GC; all three parts are required.
func NewImageGC(cfg ImageGCConfig, images ImageService, pods PodLister, fs ImageFsStats) (*ImageGC, error) {
	if images == nil || pods == nil || fs == nil {
		return nil, errors.New("gc: NewImageGC needs an image service, a pod lister and image fs stats")
	}
	if cfg.Policy.HighThresholdPercent == 0 && cfg.Policy.LowThresholdPercent == 0 {
		cfg.Policy.HighThresholdPercent, cfg.Policy.LowThresholdPercent = 85, 80
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Period == 0 {
		cfg.Period = 5 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &ImageGC{cfg: cfg, images: images, pods: pods, fs: fs, began: cfg.Clock.Now(), tracer: tracerOf(cfg.TracerProvider),
		records: map[string]*ImageRecord{}}, nil
}

// Detect refreshes the records from the runtime and returns a copy.
func (g *ImageGC) Detect(ctx context.Context) ([]ImageRecord, error) {
	imgs, err := g.images.ListImages(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc: list images: %w", err)
	}
	pods, err := g.pods.ListPods(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("gc: list pods: %w", err)
	}
	inUse := map[string]bool{}
	mounted, _ := g.pods.(MountedImageLister)
	for _, p := range pods {
		for _, c := range p.Containers {
			inUse[c.ImageID] = true
			inUse[c.ImageRef] = true
			if mounted == nil {
				continue
			}
			ids, err := mounted.MountedImages(ctx, c.ID)
			if err != nil {
				return nil, fmt.Errorf("gc: image volumes of container %s: %w", c.ID.ID, err)
			}
			for _, id := range ids {
				inUse[id] = true
			}
		}
	}
	now := g.cfg.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	var out []ImageRecord
	for _, im := range imgs {
		seen[im.Id] = true
		r, ok := g.records[im.Id]
		if !ok {
			r = &ImageRecord{ID: im.Id, FirstDetected: now, LastUsed: now}
			g.records[im.Id] = r
		}
		r.Names = append(append([]string{}, im.RepoTags...), im.RepoDigests...)
		r.Size = int64(im.Size)
		r.InUse = inUse[im.Id] || slices.ContainsFunc(r.Names, func(n string) bool { return inUse[n] })
		if r.InUse {
			r.LastUsed = now
		}
		r.Pinned = im.Pinned || slices.ContainsFunc(g.cfg.PinnedImages, func(p string) bool { return p == im.Id || slices.Contains(r.Names, p) })
		out = append(out, *r)
	}
	for id := range g.records {
		if !seen[id] {
			delete(g.records, id)
		}
	}
	return out, nil
}

func (g *ImageGC) remove(ctx context.Context, ids []string) (map[string]bool, error) {
	var errs []error
	removed := map[string]bool{}
	for _, id := range ids {
		klog.FromContext(ctx).Info("Removing image to free bytes", "imageID", id)
		if err := g.images.RemoveImage(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("gc: remove image %s: %w", id, err))
			continue
		}
		removed[id] = true
		g.mu.Lock()
		delete(g.records, id)
		g.mu.Unlock()
	}
	return removed, errors.Join(errs...)
}

// GarbageCollect is one pass: remove images past MaxAge, then, above the
// high threshold, free down to the low threshold. It fails (with
// upstream's FreeDiskSpaceFailed wording, also sent as an event) when it
// could not free enough.
func (g *ImageGC) GarbageCollect(ctx context.Context) error {
	ctx, span := g.tracer.Start(ctx, imageGCSpan)
	defer span.End()
	began := g.cfg.Clock.Now()
	records, err := g.Detect(ctx)
	if err != nil {
		return err
	}
	removed := map[string]bool{}
	defer func() { g.prune(ctx, records, removed, began) }()
	fs, err := g.fs.ImageFs(ctx)
	if err != nil {
		return fmt.Errorf("gc: image fs stats: %w", err)
	}
	var capacity, available int64
	if fs != nil && fs.CapacityBytes != nil {
		capacity = int64(*fs.CapacityBytes)
	}
	if fs != nil && fs.AvailableBytes != nil {
		available = int64(*fs.AvailableBytes)
	}
	plan, err := PlanImageGC(g.cfg.Policy, g.cfg.Clock.Now(), g.began, records, capacity, available)
	if err != nil {
		g.event("InvalidDiskCapacity", err.Error())
		return err
	}
	byAge, errAge := g.remove(ctx, plan.ByAge)
	bySpace, errSpace := g.remove(ctx, plan.BySpace)
	maps.Copy(removed, byAge)
	maps.Copy(removed, bySpace)
	if err := errors.Join(errAge, errSpace); err != nil {
		return err
	}
	var freed int64
	for _, r := range records {
		if bySpace[r.ID] || byAge[r.ID] {
			freed += r.Size
		}
	}
	if plan.BytesToFree > 0 && freed < plan.BytesToFree {
		usage := 100 - int(min(available, capacity)*100/capacity)
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usage, formatSize(capacity), freed)
		g.event("FreeDiskSpaceFailed", msg)
		return errors.New(msg)
	}
	return nil
}

// Reclaim removes every unused, unpinned image at least MinAge old: the
// eviction manager's "delete unused images" step.
func (g *ImageGC) Reclaim(ctx context.Context) error {
	began := g.cfg.Clock.Now()
	records, err := g.Detect(ctx)
	if err != nil {
		return err
	}
	ids, _ := FreeSpace(g.cfg.Policy.MinAge, g.cfg.Clock.Now(), EvictionOrder(records), math.MaxInt64)
	removed, err := g.remove(ctx, ids)
	g.prune(ctx, records, removed, began)
	return err
}

// prune hands Config.Records the images a pass found and did not remove.
func (g *ImageGC) prune(ctx context.Context, records []ImageRecord, removed map[string]bool, began time.Time) {
	if g.cfg.Records == nil {
		return
	}
	present := make([]string, 0, len(records))
	for _, r := range records {
		if !removed[r.ID] {
			present = append(present, r.ID)
		}
	}
	g.cfg.Records.Prune(ctx, present, began)
}

// Run detects images at once (so ages count from the start), then calls
// GarbageCollect every Period until ctx is done.
func (g *ImageGC) Run(ctx context.Context) error {
	if _, err := g.Detect(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Image detection failed")
	}
	t := g.cfg.Clock.NewTicker(g.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
			if err := g.GarbageCollect(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Image garbage collection failed")
			}
		}
	}
}

func (g *ImageGC) event(reason, msg string) {
	if g.cfg.Events != nil && g.cfg.NodeRef != nil {
		g.cfg.Events.Eventf(g.cfg.NodeRef, v1.EventTypeWarning, reason, "%s", msg)
	}
}

func formatSize(b int64) string {
	const unit = 1024
	f := float64(b)
	switch {
	case f < unit:
		return fmt.Sprintf("%d B", b)
	case f < unit*unit:
		return fmt.Sprintf("%.1f KiB", f/unit)
	case f < unit*unit*unit:
		return fmt.Sprintf("%.1f MiB", f/(unit*unit))
	case f < unit*unit*unit*unit:
		return fmt.Sprintf("%.1f GiB", f/(unit*unit*unit))
	}
	return fmt.Sprintf("%.1f TiB", f/(unit*unit*unit*unit))
}
