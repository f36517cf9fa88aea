package gc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// podStates is a fake PodStateProvider: content maps UIDs whose content
// may go, runtime those terminated.
type podStates struct{ content, runtime map[types.UID]bool }

func (s podStates) ShouldPodContentBeRemoved(uid types.UID) bool { return s.content[uid] }
func (s podStates) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	return s.runtime[uid] || s.content[uid]
}

var _ PodStateProvider = podStates{}

var t0 = time.Unix(100000, 0)

func ctr(id, name string, state nodekit.State, age time.Duration) *nodekit.Container {
	return &nodekit.Container{ID: nodekit.ContainerID{Type: "containerd", ID: id}, Name: name, State: state, CreatedAt: t0.Add(-age)}
}

func sbx(id string, ready bool, age time.Duration) *nodekit.Container {
	st := nodekit.StateExited
	if ready {
		st = nodekit.StateRunning
	}
	return &nodekit.Container{ID: nodekit.ContainerID{Type: "containerd", ID: id}, State: st, CreatedAt: t0.Add(-age)}
}

func ids(cs []nodekit.ContainerID) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestPlanContainerGC(t *testing.T) {
	h := time.Hour
	podA := func() *nodekit.Pod {
		return &nodekit.Pod{ID: "a", Containers: []*nodekit.Container{
			ctr("a-run", "app", nodekit.StateRunning, 1*h),
			ctr("a-dead1", "app", nodekit.StateExited, 2*h),
			ctr("a-dead2", "app", nodekit.StateExited, 3*h),
			ctr("a-dead3", "app", nodekit.StateExited, 4*h),
			ctr("a-side", "side", nodekit.StateExited, 5*h),
		}, Sandboxes: []*nodekit.Container{sbx("a-sb-new", true, 1*h), sbx("a-sb-old", false, 6*h)}}
	}
	podB := func() *nodekit.Pod {
		return &nodekit.Pod{ID: "b", Containers: []*nodekit.Container{
			ctr("b-dead1", "app", nodekit.StateExited, 1*h),
			ctr("b-dead2", "app", nodekit.StateExited, 2*h),
		}, Sandboxes: []*nodekit.Container{sbx("b-sb", false, 3*h)}}
	}
	podC := func() *nodekit.Pod {
		return &nodekit.Pod{ID: "c", Containers: []*nodekit.Container{
			ctr("c-young", "app", nodekit.StateExited, time.Second),
			ctr("c-unknown", "app", nodekit.StateUnknown, 2*h),
		}}
	}
	none := podStates{}
	tests := []struct {
		name           string
		policy         ContainerPolicy
		pods           []*nodekit.Pod
		state          podStates
		ready, nonDel  bool
		wantContainers []string
		wantSandboxes  []string
	}{
		{
			name:           "upstream defaults keep newest dead per container",
			policy:         ContainerPolicy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1},
			pods:           []*nodekit.Pod{podA(), podB()},
			state:          none,
			ready:          true,
			wantContainers: []string{"a-dead2", "a-dead3", "b-dead2"},
			wantSandboxes:  []string{"a-sb-old"},
		},
		{
			name:          "no limits removes nothing but old sandboxes",
			policy:        ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: -1},
			pods:          []*nodekit.Pod{podA(), podB()},
			state:         none,
			ready:         true,
			wantSandboxes: []string{"a-sb-old"},
		},
		{
			name:           "min age protects young containers; unknown counts as dead",
			policy:         ContainerPolicy{MinAge: time.Minute, MaxPerPodContainer: 0, MaxContainers: -1},
			pods:           []*nodekit.Pod{podC()},
			state:          none,
			ready:          true,
			wantContainers: []string{"c-unknown"},
		},
		{
			name:           "deleted pod loses everything",
			policy:         ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			pods:           []*nodekit.Pod{podB()},
			state:          podStates{content: map[types.UID]bool{"b": true}},
			ready:          true,
			wantContainers: []string{"b-dead1", "b-dead2"},
			wantSandboxes:  []string{"b-sb"},
		},
		{
			name:           "deleted pod kept until sources ready",
			policy:         ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			pods:           []*nodekit.Pod{podB()},
			state:          podStates{content: map[types.UID]bool{"b": true}},
			ready:          false,
			wantContainers: []string{"b-dead2"},
		},
		{
			name:           "terminated pod only with evictNonDeleted",
			policy:         ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: -1},
			pods:           []*nodekit.Pod{podB()},
			state:          podStates{runtime: map[types.UID]bool{"b": true}},
			ready:          true,
			nonDel:         true,
			wantContainers: []string{"b-dead1", "b-dead2"},
			wantSandboxes:  []string{"b-sb"},
		},
		{
			name:   "total cap removes oldest but keeps newest of each",
			policy: ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 3},
			pods:   []*nodekit.Pod{podA(), podB()},
			state:  none,
			ready:  true,
			// units: a/app(3 dead), a/side(1), b/app(2): 6 dead; even cut to 1 each -> 3.
			wantContainers: []string{"a-dead2", "a-dead3", "b-dead2"},
			wantSandboxes:  []string{"a-sb-old"},
		},
		{
			name:           "total cap below the number of units keeps one each",
			policy:         ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 1},
			pods:           []*nodekit.Pod{podA(), podB()},
			state:          none,
			ready:          true,
			wantContainers: []string{"a-dead2", "a-dead3", "b-dead2"},
			wantSandboxes:  []string{"a-sb-old"},
		},
		{
			name:   "total cap 4: even cut to 1, nothing more to remove",
			policy: ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 5},
			pods:   []*nodekit.Pod{podA(), podB()},
			state:  none,
			ready:  true,
			// 6 > 5: cut to max(1, 5/3)=1 each.
			wantContainers: []string{"a-dead2", "a-dead3", "b-dead2"},
			wantSandboxes:  []string{"a-sb-old"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := PlanContainerGC(t0, tt.policy, tt.pods, tt.state, tt.ready, tt.nonDel)
			if got := ids(plan.Containers); !slices.Equal(got, tt.wantContainers) {
				t.Errorf("containers = %v, want %v", got, tt.wantContainers)
			}
			if !slices.Equal(plan.Sandboxes, tt.wantSandboxes) {
				t.Errorf("sandboxes = %v, want %v", plan.Sandboxes, tt.wantSandboxes)
			}
		})
	}
}

func TestPlanLogDirs(t *testing.T) {
	got := PlanLogDirs([]string{"ns_web_a", "ns_db_b", "junk", "ns_x_"}, podStates{content: map[types.UID]bool{"a": true}})
	if !slices.Equal(got, []string{"ns_web_a"}) {
		t.Errorf("got %v", got)
	}
}

type fakeRuntime struct {
	pods               []*nodekit.Pod
	removed, sandboxes []string
	fail               string
}

func (f *fakeRuntime) ListPods(context.Context, bool) ([]*nodekit.Pod, error) { return f.pods, nil }
func (f *fakeRuntime) RemoveContainer(_ context.Context, id nodekit.ContainerID) error {
	if id.ID == f.fail {
		return errors.New("boom")
	}
	f.removed = append(f.removed, id.ID)
	return nil
}
func (f *fakeRuntime) RemovePodSandbox(_ context.Context, id string) error {
	f.sandboxes = append(f.sandboxes, id)
	return nil
}

var _ ContainerRuntime = (*fakeRuntime)(nil)

func TestContainerGCStep(t *testing.T) {
	logs := t.TempDir()
	for _, d := range []string{"ns_gone_g", "ns_live_l"} {
		if err := os.MkdirAll(filepath.Join(logs, d, "app"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt := &fakeRuntime{fail: "l-dead3", pods: []*nodekit.Pod{
		{ID: "l", Containers: []*nodekit.Container{
			ctr("l-dead1", "app", nodekit.StateExited, time.Hour),
			ctr("l-dead2", "app", nodekit.StateExited, 2*time.Hour),
			ctr("l-dead3", "app", nodekit.StateExited, 3*time.Hour),
		}},
		{ID: "g", Containers: []*nodekit.Container{ctr("g-dead", "app", nodekit.StateExited, time.Hour)},
			Sandboxes: []*nodekit.Container{sbx("g-sb", false, time.Hour)}},
	}}
	g, err := NewContainerGC(ContainerGCConfig{Policy: ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
		PodLogsDir: logs, Clock: clocktesting.NewFakeClock(t0)}, rt, podStates{content: map[types.UID]bool{"g": true}})
	if err != nil {
		t.Fatal(err)
	}
	err = g.GarbageCollect(t.Context(), false)
	if err == nil {
		t.Error("a failed removal was not reported")
	}
	if !slices.Equal(rt.removed, []string{"g-dead", "l-dead2"}) || !slices.Equal(rt.sandboxes, []string{"g-sb"}) {
		t.Errorf("removed %v sandboxes %v", rt.removed, rt.sandboxes)
	}
	if _, err := os.Stat(filepath.Join(logs, "ns_gone_g")); !os.IsNotExist(err) {
		t.Errorf("logs of gone pod kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(logs, "ns_live_l")); err != nil {
		t.Errorf("logs of live pod removed: %v", err)
	}
}
