package cpumanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit"
)

func TestRestartKeepsAssignments(t *testing.T) {
	dir := t.TempDir()
	pods := &fakePods{}
	cfg := Config{Policy: PolicyStatic, Topology: dualSocketHT(t), ReservedCPU: resource.MustParse("1"), StateDir: dir, ActivePods: pods}
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("p", nil, container{name: "app", cpu: "4"})
	pods.pods = []*v1.Pod{pod}
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	before, _ := m.CPUSet("p", "app")
	shared, _ := m.CPUSet("p", "other")

	m2, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := m2.CPUSet("p", "app"); after != before {
		t.Fatalf("after restart %s, before %s", after, before)
	}
	if s, _ := m2.CPUSet("p", "other"); s != shared || s != "0-1,3,5-7,9,11" {
		t.Fatalf("shared pool after restart %s, before %s", s, shared)
	}
}

func TestPolicyChangeIsRefused(t *testing.T) {
	dir := t.TempDir()
	_, ctx := ktesting.NewTestContext(t)
	if _, err := New(ctx, Config{Policy: PolicyStatic, Topology: singleSocketHT(t), ReservedCPU: resource.MustParse("1"), StateDir: dir, ActivePods: &fakePods{}}); err != nil {
		t.Fatal(err)
	}
	_, err := New(ctx, Config{Policy: PolicyNone, StateDir: dir})
	want := `could not restore state from checkpoint: configured policy "none" differs from state checkpoint policy "static", please drain this node and delete the CPU manager checkpoint file "` +
		filepath.Join(dir, StateFileName) + `" before restarting Kubelet`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v\nwant %s", err, want)
	}
}

func TestBadCheckpointsStopTheStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for name, tc := range map[string]struct {
		content, want string
	}{
		"garbage":       {"\x00\x01not json", "invalid character"},
		"empty":         {"", "unexpected end of JSON input"},
		"bad checksum":  {`{"policyName":"static","defaultCpuSet":"0-7","data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-7\"}","dataChecksum":1}`, "checkpoint is corrupted"},
		"other machine": {validFile(t, "static", "0-15"), `current set of available CPUs "0-7" doesn't match with CPUs in state "0-15"`},
		"reserved CPU given out": {validFile(t, "static", "1-7", "p/app=0"),
			`not all reserved cpus: "0" are present in defaultCpuSet: "1-7"`},
		"two pods, one CPU": {validFile(t, "static", "0,3-7", "p/app=1-2", "q/app=2"), `overlaps with CPUs of pod`},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := New(ctx, Config{Policy: PolicyStatic, Topology: singleSocketHT(t), ReservedCPU: resource.MustParse("1"), StateDir: dir, ActivePods: &fakePods{}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "drain") {
				t.Fatalf("error %v, want %q and advice to drain", err, tc.want)
			}
		})
	}
}

// validFile is a well-formed checkpoint; entries are "pod/container=cpus".
func validFile(t *testing.T, policy, shared string, entries ...string) string {
	st := newState()
	st.defaultSet = set(t, shared)
	for _, e := range entries {
		ref, cpus, _ := strings.Cut(e, "=")
		pod, name, _ := strings.Cut(ref, "/")
		st.set(pod, name, set(t, cpus))
	}
	b, err := encodeCheckpoint(policy, st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNonePolicy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	m, err := New(ctx, Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	pod := makePod("p", nil, container{name: "app", cpu: "2"})
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	if s, ok := m.CPUSet("p", "app"); ok || s != "" {
		t.Fatalf("none policy pins %q", s)
	}
	if h := m.TopologyHints(ctx, pod, &pod.Spec.Containers[0]); h != nil {
		t.Fatalf("none policy hints %v", h)
	}
	b, _ := os.ReadFile(filepath.Join(dir, StateFileName))
	if !strings.Contains(string(b), `"policyName":"none"`) || !strings.Contains(string(b), `"defaultCpuSet":""`) {
		t.Fatalf("checkpoint %s", b)
	}
}

// statuses is a PodStatusGetter over a map, safe for a concurrent Run.
type statuses struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

var _ PodStatusGetter = (*statuses)(nil)

func newStatuses() *statuses { return &statuses{m: map[types.UID]v1.PodStatus{}} }

func (s *statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[uid]
	return st, ok
}

func (s *statuses) set(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[uid] = st
}

// recorder is a ResourceUpdater that records calls and can fail them.
type recorder struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]bool
}

var _ ResourceUpdater = (*recorder)(nil)

func (r *recorder) UpdateContainerResources(_ context.Context, id nodekit.ContainerID, cpus string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail[id.ID] {
		return errors.New("runtime down")
	}
	r.calls = append(r.calls, id.ID+"="+cpus)
	return nil
}

func (r *recorder) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.calls, " ")
	r.calls = nil
	return s
}

func running(name, id string) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, ContainerID: "containerd://" + id, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
}

func TestReconcilePushesSharedPoolChanges(t *testing.T) {
	rt := &recorder{fail: map[string]bool{}}
	sts := newStatuses()
	m, pods := newStaticManager(t, singleSocketHT(t), func(c *Config) { c.Status, c.Runtime = sts, rt })
	ctx := t.Context()
	admit := func(p *v1.Pod) {
		t.Helper()
		if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: p, Pods: pods.pods}); !d.Admit {
			t.Fatal(d)
		}
		pods.pods = append(pods.pods, p)
	}
	shared := makePod("s", nil, container{name: "app", cpu: "1/2"})
	excl := makePod("e", nil, container{name: "app", cpu: "2"})
	admit(shared)
	admit(excl)
	sts.set("s", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running("app", "s1")}})
	sts.set("e", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running("app", "e1")}})
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.take(); got != "s1=0,2-4,6-7 e1=1,5" {
		t.Fatalf("first pass: %q", got)
	}
	if err := m.Reconcile(ctx); err != nil || rt.take() != "" {
		t.Fatal("second pass repeated updates")
	}
	// A new exclusive pod shrinks the pool: only the shared container
	// changes; its new container is not running yet.
	excl2 := makePod("f", nil, container{name: "app", cpu: "2"})
	admit(excl2)
	sts.set("f", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}}})
	rt.fail["s1"] = true
	if err := m.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "runtime down") {
		t.Fatalf("failed update not reported: %v", err)
	}
	delete(rt.fail, "s1")
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.take(); got != "s1=0,3-4,7" {
		t.Fatalf("after the pool shrank: %q", got)
	}
	// The exclusive pod goes: its CPUs return to the pool.
	pods.remove("e")
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.take(); got != "s1=0-1,3-5,7" {
		t.Fatalf("after pod e left: %q", got)
	}
}

func TestRunReconcilesOnEveryTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &recorder{}
		sts := newStatuses()
		m, pods := newStaticManager(t, singleSocketHT(t), func(c *Config) {
			c.Status, c.Runtime, c.ReconcilePeriod = sts, rt, 5*time.Second
		})
		pods.pods = []*v1.Pod{makePod("s", nil, container{name: "app", cpu: "1/2"})}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait() // the first pass found nothing running
		if got := rt.take(); got != "" {
			t.Fatalf("updates before the container ran: %q", got)
		}
		sts.set("s", v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{running("app", "s1")}})
		time.Sleep(5 * time.Second) // the bubble's clock: the next tick
		synctest.Wait()
		if got := rt.take(); got != "s1=0-7" {
			t.Fatalf("updates %q", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestAllocatableCPUs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(ctx, Config{Policy: PolicyStatic, Topology: singleSocketHT(t), ReservedSystemCPUs: cpuset.New(0, 4), StateDir: t.TempDir(), ActivePods: &fakePods{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.AllocatableCPUs().String(); got != "1-3,5-7" {
		t.Errorf("static: allocatable %s, want 1-3,5-7 (all but the reserved)", got)
	}
	none, err := New(ctx, Config{Policy: PolicyNone, StateDir: t.TempDir(), ActivePods: &fakePods{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := none.AllocatableCPUs(); !got.IsEmpty() {
		t.Errorf("none: allocatable %s, want none", got)
	}
}
