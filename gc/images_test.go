package gc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

func rec(id string, size int64, detectedAgo, usedAgo time.Duration) ImageRecord {
	return ImageRecord{ID: id, Size: size, FirstDetected: t0.Add(-detectedAgo), LastUsed: t0.Add(-usedAgo)}
}

func TestPlanImageGC(t *testing.T) {
	h := time.Hour
	policy := ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
	inUse := rec("in-use", 50, 10*h, 0)
	inUse.InUse = true
	pinned := rec("pause", 50, 10*h, 10*h)
	pinned.Pinned = true
	images := []ImageRecord{
		rec("old-lru", 10, 10*h, 9*h),
		rec("newer", 10, 10*h, 1*h),
		rec("tie-earlier-detected", 10, 11*h, 5*h),
		rec("tie-later-detected", 10, 10*h, 5*h),
		rec("young", 100, time.Minute, time.Minute),
		inUse, pinned,
	}
	tests := []struct {
		name                string
		policy              ImagePolicy
		began               time.Time
		capacity, available int64
		wantAge, wantSpace  []string
		wantToFree          int64
		wantErr             bool
	}{
		{name: "below high threshold", policy: policy, capacity: 1000, available: 160},
		{name: "at high threshold frees to low, LRU first", policy: policy, capacity: 1000, available: 150,
			wantToFree: 50, wantSpace: []string{"old-lru", "tie-earlier-detected", "tie-later-detected", "newer"}},
		{name: "frees only what is needed", policy: ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 84, MinAge: time.Minute},
			capacity: 1000, available: 150, wantToFree: 10, wantSpace: []string{"old-lru"}},
		{name: "never in-use, pinned or young", policy: policy, capacity: 1000, available: 0,
			wantToFree: 200, wantSpace: []string{"old-lru", "tie-earlier-detected", "tie-later-detected", "newer"}},
		{name: "max age removes unused images", policy: ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: 4 * h},
			began: t0.Add(-5 * h), capacity: 1000, available: 900,
			wantAge: []string{"old-lru", "tie-earlier-detected", "tie-later-detected"}},
		{name: "max age waits for GC to have run that long", policy: ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: 4 * h},
			began: t0.Add(-time.Hour), capacity: 1000, available: 900},
		{name: "zero capacity", policy: policy, capacity: 0, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.began.IsZero() {
				tt.began = t0.Add(-100 * h)
			}
			plan, err := PlanImageGC(tt.policy, t0, tt.began, images, tt.capacity, tt.available)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !slices.Equal(plan.ByAge, tt.wantAge) || !slices.Equal(plan.BySpace, tt.wantSpace) || plan.BytesToFree != tt.wantToFree {
				t.Errorf("plan = %+v, want age %v space %v toFree %d", plan, tt.wantAge, tt.wantSpace, tt.wantToFree)
			}
		})
	}
}

func TestImagePolicyValidate(t *testing.T) {
	for _, p := range []ImagePolicy{{HighThresholdPercent: 101}, {HighThresholdPercent: 50, LowThresholdPercent: 60},
		{HighThresholdPercent: 80, LowThresholdPercent: 70, MinAge: time.Hour, MaxAge: time.Minute}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

type fakeImages struct {
	images  []*runtimeapi.Image
	removed []string
}

func (f *fakeImages) ListImages(context.Context) ([]*runtimeapi.Image, error) { return f.images, nil }
func (f *fakeImages) RemoveImage(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	f.images = slices.DeleteFunc(f.images, func(i *runtimeapi.Image) bool { return i.Id == id })
	return nil
}

type fakePods []*nodekit.Pod

func (f fakePods) ListPods(context.Context, bool) ([]*nodekit.Pod, error) { return f, nil }

type fakeFs struct{ capacity, available uint64 }

func (f fakeFs) ImageFs(context.Context) (*statsapi.FsStats, error) {
	return &statsapi.FsStats{CapacityBytes: &f.capacity, AvailableBytes: &f.available}, nil
}

var (
	_ ImageService = (*fakeImages)(nil)
	_ PodLister    = fakePods(nil)
	_ ImageFsStats = fakeFs{}
)

func TestImageGCStep(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	imgs := &fakeImages{images: []*runtimeapi.Image{
		{Id: "sha256:app", RepoTags: []string{"app:1"}, Size: 300},
		{Id: "sha256:pause", RepoTags: []string{"registry.k8s.io/pause:3.10"}, Size: 100},
		{Id: "sha256:pinned", Size: 100, Pinned: true},
		{Id: "sha256:old", Size: 200},
	}}
	pods := fakePods{{ID: "p", Containers: []*nodekit.Container{{Name: "c", ImageID: "sha256:app", State: nodekit.StateExited}}}}
	g, err := NewImageGC(ImageGCConfig{Policy: ImagePolicy{MinAge: 2 * time.Minute}, PinnedImages: []string{"registry.k8s.io/pause:3.10"}, Clock: clk}, imgs, pods, fakeFs{1000, 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Too young: nothing can go, so GC reports failure with upstream's words.
	err = g.GarbageCollect(t.Context())
	if err == nil || !strings.Contains(err.Error(), "Failed to free sufficient space by deleting unused images (freed 0 bytes)") {
		t.Errorf("err = %v", err)
	}
	clk.Step(3 * time.Minute)
	err = g.GarbageCollect(t.Context())
	if !slices.Equal(imgs.removed, []string{"sha256:old"}) {
		t.Errorf("removed %v, want only sha256:old", imgs.removed)
	}
	if err != nil {
		t.Errorf("freed 200 of the 100 needed, yet: %v", err)
	}
	if err := g.Reclaim(t.Context()); err != nil || len(imgs.removed) != 1 {
		t.Errorf("reclaim removed %v err %v; in-use and pinned must stay", imgs.removed, err)
	}
}

// mountingPods is a PodLister whose containers also mount images as image
// volumes (MountedImageLister).
type mountingPods struct {
	fakePods
	mounts map[string][]string // container ID -> image IDs
}

func (m mountingPods) MountedImages(_ context.Context, id nodekit.ContainerID) ([]string, error) {
	return m.mounts[id.ID], nil
}

var _ MountedImageLister = mountingPods{}

// TestImageGCKeepsImageVolumes: an image a container mounts as an image
// volume is in use, as upstream; an unmounted one of the same age goes.
func TestImageGCKeepsImageVolumes(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	imgs := &fakeImages{images: []*runtimeapi.Image{
		{Id: "sha256:app", Size: 100}, {Id: "sha256:tools", Size: 100}, {Id: "sha256:old", Size: 100},
	}}
	pods := mountingPods{
		fakePods: fakePods{{ID: "p", Containers: []*nodekit.Container{{ID: nodekit.ContainerID{ID: "c1"}, Name: "c", ImageID: "sha256:app", State: nodekit.StateRunning}}}},
		mounts:   map[string][]string{"c1": {"sha256:tools"}},
	}
	g, err := NewImageGC(ImageGCConfig{Clock: clk}, imgs, pods, fakeFs{1000, 0})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := g.Detect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if want := r.ID != "sha256:old"; r.InUse != want {
			t.Errorf("%s in use = %v, want %v", r.ID, r.InUse, want)
		}
	}
	clk.Step(time.Minute)
	_ = g.GarbageCollect(t.Context()) // frees too little: only old may go
	if !slices.Equal(imgs.removed, []string{"sha256:old"}) {
		t.Errorf("removed %v, want only sha256:old", imgs.removed)
	}
}

// fakePruner records each Prune.
type fakePruner struct{ calls []string }

var _ RecordPruner = (*fakePruner)(nil)

func (f *fakePruner) Prune(_ context.Context, present []string, until time.Time) {
	p := slices.Clone(present)
	slices.Sort(p)
	f.calls = append(f.calls, fmt.Sprintf("%v until t0+%v", p, until.Sub(t0)))
}

// TestImageGCPrunesRecords: after each pass the pull records are pruned
// to the images the pass found and did not remove (in use and pinned
// ones too), with the time the pass began.
func TestImageGCPrunesRecords(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	imgs := &fakeImages{images: []*runtimeapi.Image{
		{Id: "sha256:app", Size: 300}, {Id: "sha256:pinned", Size: 100, Pinned: true}, {Id: "sha256:old", Size: 200},
		{Id: "sha256:unused", Size: 100},
	}}
	pods := fakePods{{ID: "p", Containers: []*nodekit.Container{{Name: "c", ImageID: "sha256:app", State: nodekit.StateRunning}}}}
	records := &fakePruner{}
	g, err := NewImageGC(ImageGCConfig{Policy: ImagePolicy{MinAge: time.Minute}, Clock: clk, Records: records}, imgs, pods, fakeFs{1000, 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Detect(t.Context()); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Minute)
	if err := g.GarbageCollect(t.Context()); err != nil { // needs 100: the oldest-used unused image goes
		t.Fatal(err)
	}
	if len(imgs.removed) != 1 {
		t.Fatalf("removed %v, want one image", imgs.removed)
	}
	first := imgs.removed[0]
	clk.Step(time.Minute)
	if err := g.Reclaim(t.Context()); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, id := range []string{"sha256:app", "sha256:old", "sha256:pinned", "sha256:unused"} {
		if id != first {
			left = append(left, id)
		}
	}
	want := []string{
		fmt.Sprintf("%v until t0+2m0s", left),
		"[sha256:app sha256:pinned] until t0+3m0s",
	}
	if !slices.Equal(records.calls, want) {
		t.Errorf("prunes\n%q\nwant\n%q", records.calls, want)
	}
}
