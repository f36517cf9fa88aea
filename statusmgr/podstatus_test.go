package statusmgr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podstatus"
)

// recordingSink is a nodekit.StatusSink that records what it is given and
// fails the next failSet / failDelete calls.
type recordingSink struct {
	mu         sync.Mutex
	sets       []sinkSet
	deletes    []types.UID
	failSet    int
	failDelete int
}

type sinkSet struct {
	name   string
	uid    types.UID
	status v1.PodStatus
}

var _ nodekit.StatusSink = (*recordingSink)(nil)

func (s *recordingSink) SetPodStatus(_ context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSet > 0 {
		s.failSet--
		return errors.New("sink down")
	}
	s.sets = append(s.sets, sinkSet{pod.Name, pod.UID, *st.DeepCopy()})
	return nil
}

func (s *recordingSink) DeletePod(_ context.Context, pod *v1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failDelete > 0 {
		s.failDelete--
		return errors.New("sink down")
	}
	s.deletes = append(s.deletes, pod.UID)
	return nil
}

// takeSets returns and forgets the recorded status writes.
func (s *recordingSink) takeSets() []sinkSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sets
	s.sets = nil
	return out
}

func (s *recordingSink) deleted() []types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]types.UID(nil), s.deletes...)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestManager(t *testing.T, cfg Config) (*Manager, *recordingSink, *clocktesting.FakeClock) {
	t.Helper()
	sink := &recordingSink{}
	fc := clocktesting.NewFakeClock(t0)
	if cfg.Sink == nil {
		cfg.Sink = sink
	}
	cfg.Clock = fc
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, sink, fc
}

func testPod(name string, containers ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"), Generation: 1,
			Annotations: map[string]string{annotationConfigSource: "api"}},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "busybox"})
	}
	return p
}

func running(name string, ready bool) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, ContainerID: "fake://" + name, Ready: ready,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}
}

func exited(name string, code int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, ContainerID: "fake://" + name,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code, Reason: "Completed"}}}
}

func waiting(name string) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}}
}

func runningStatus(cs ...v1.ContainerStatus) v1.PodStatus {
	return v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: cs}
}

func mustSet(t *testing.T, m *Manager, pod *v1.Pod, st v1.PodStatus) {
	t.Helper()
	if err := m.SetPodStatus(pod, st); err != nil {
		t.Fatalf("SetPodStatus(%s): %v", pod.Name, err)
	}
}

func mustSync(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.SyncOnce(t.Context()); err != nil {
		t.Fatalf("SyncOnce: %v", err)
	}
}

func condition(st v1.PodStatus, typ v1.PodConditionType) *v1.PodCondition {
	return podstatus.Find(st.Conditions, typ)
}

func TestVersionsArePublishedOnce(t *testing.T) {
	m, sink, fc := newTestManager(t, Config{})
	pod := testPod("web", "c")

	mustSet(t, m, pod, runningStatus(running("c", false)))
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 1 || got[0].status.Phase != v1.PodRunning {
		t.Fatalf("first sync published %+v, want one Running status", got)
	}
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 0 {
		t.Fatalf("second sync with nothing new published %d statuses", len(got))
	}

	// The same status again, even later, is not a new version.
	fc.Step(time.Minute)
	mustSet(t, m, pod, runningStatus(running("c", false)))
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 0 {
		t.Fatalf("an unchanged status was published again: %+v", got)
	}

	// Two changes before a sync publish only the newest.
	mustSet(t, m, pod, runningStatus(running("c", true)))
	mustSet(t, m, pod, runningStatus(exited("c", 1)))
	mustSync(t, m)
	got := sink.takeSets()
	if len(got) != 1 || got[0].status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("published %+v, want only the newest (terminated) status", got)
	}
	st, ok := m.GetPodStatus(pod.UID)
	if !ok || st.StartTime == nil || !st.StartTime.Time.Equal(t0) {
		t.Errorf("GetPodStatus = %v, %v; want the cached status with startTime %v", st.StartTime, ok, t0)
	}
	if st.ObservedGeneration != 1 {
		t.Errorf("observedGeneration = %d, want the pod's generation 1", st.ObservedGeneration)
	}
}

func TestFailedWriteIsRetried(t *testing.T) {
	m, sink, _ := newTestManager(t, Config{})
	pod := testPod("web", "c")
	sink.failSet = 1
	mustSet(t, m, pod, runningStatus(running("c", false)))
	if err := m.SyncOnce(t.Context()); err == nil {
		t.Fatal("SyncOnce with a failing sink returned nil")
	}
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 1 {
		t.Fatalf("retry published %d statuses, want 1", len(got))
	}
}

func TestTerminalPhaseStaysTerminal(t *testing.T) {
	for _, phase := range []v1.PodPhase{v1.PodSucceeded, v1.PodFailed} {
		t.Run(string(phase), func(t *testing.T) {
			m, sink, _ := newTestManager(t, Config{})
			pod := testPod("job", "c")
			pod.Spec.RestartPolicy = v1.RestartPolicyNever
			mustSet(t, m, pod, v1.PodStatus{Phase: phase, Reason: "Done", ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}})
			for _, back := range []v1.PodPhase{v1.PodRunning, v1.PodPending, v1.PodUnknown} {
				mustSet(t, m, pod, v1.PodStatus{Phase: back, ContainerStatuses: []v1.ContainerStatus{exited("c", 0)}})
			}
			st, _ := m.GetPodStatus(pod.UID)
			if st.Phase != phase || st.Reason != "Done" {
				t.Errorf("phase = %s (reason %q), want %s (Done) kept", st.Phase, st.Reason, phase)
			}
			mustSync(t, m)
			for _, s := range sink.takeSets() {
				if s.status.Phase != phase {
					t.Errorf("published phase %s, want %s", s.status.Phase, phase)
				}
			}
		})
	}
}

func TestTerminatedContainerNeverRestartsAgainstPolicy(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name    string
		policy  v1.RestartPolicy
		sidecar bool
		code    int32
		next    v1.ContainerStatus
		wantErr bool
	}{
		{name: "Never/exit0/running", policy: v1.RestartPolicyNever, code: 0, next: running("c", false), wantErr: true},
		{name: "Never/exit1/waiting", policy: v1.RestartPolicyNever, code: 1, next: waiting("c"), wantErr: true},
		{name: "OnFailure/exit0/running", policy: v1.RestartPolicyOnFailure, code: 0, next: running("c", false), wantErr: true},
		{name: "OnFailure/exit1/running", policy: v1.RestartPolicyOnFailure, code: 1, next: running("c", false)},
		{name: "Always/exit0/running", policy: v1.RestartPolicyAlways, code: 0, next: running("c", false)},
		{name: "Never/exit0/still-terminated", policy: v1.RestartPolicyNever, code: 0, next: exited("c", 0)},
		{name: "Never/container-policy-Always", policy: v1.RestartPolicyNever, sidecar: true, code: 0, next: running("c", false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newTestManager(t, Config{})
			pod := testPod("p", "c")
			pod.Spec.RestartPolicy = tc.policy
			if tc.sidecar {
				pod.Spec.Containers[0].RestartPolicy = &always
			}
			mustSet(t, m, pod, runningStatus(exited("c", tc.code)))
			err := m.SetPodStatus(pod, runningStatus(tc.next))
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrIllegalTransition)) {
				t.Fatalf("SetPodStatus = %v, want ErrIllegalTransition: %v", err, tc.wantErr)
			}
			st, _ := m.GetPodStatus(pod.UID)
			if terminated := st.ContainerStatuses[0].State.Terminated != nil; tc.wantErr && !terminated {
				t.Errorf("a refused update changed the cache: %+v", st.ContainerStatuses[0].State)
			}
		})
	}
}

func TestConditionTransitionTimes(t *testing.T) {
	m, _, fc := newTestManager(t, Config{})
	pod := testPod("web", "c")
	withReady := func(ready v1.ConditionStatus, cs v1.ContainerStatus) v1.PodStatus {
		st := runningStatus(cs)
		st.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: ready}, {Type: v1.PodScheduled, Status: v1.ConditionTrue}}
		return st
	}
	mustSet(t, m, pod, withReady(v1.ConditionTrue, running("c", true)))

	fc.Step(time.Minute)
	st := withReady(v1.ConditionTrue, running("c", true))
	st.Message = "something else changed"
	mustSet(t, m, pod, st)
	got, _ := m.GetPodStatus(pod.UID)
	if ltt := condition(got, v1.PodReady).LastTransitionTime; !ltt.Time.Equal(t0) {
		t.Errorf("Ready lastTransitionTime = %v after an update that kept it True, want %v", ltt, t0)
	}

	fc.Step(time.Minute)
	mustSet(t, m, pod, withReady(v1.ConditionFalse, running("c", false)))
	got, _ = m.GetPodStatus(pod.UID)
	if ltt := condition(got, v1.PodReady).LastTransitionTime; !ltt.Time.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("Ready lastTransitionTime = %v after it flipped, want %v", ltt, t0.Add(2*time.Minute))
	}
	if ltt := condition(got, v1.PodScheduled).LastTransitionTime; !ltt.Time.Equal(t0) {
		t.Errorf("PodScheduled lastTransitionTime = %v, want %v kept", ltt, t0)
	}
	if !got.StartTime.Time.Equal(t0) {
		t.Errorf("startTime = %v, want %v kept", got.StartTime, t0)
	}
}

func TestFieldsTheWorkerLeavesOutAreKept(t *testing.T) {
	m, _, _ := newTestManager(t, Config{})
	pod := testPod("web", "c")
	pod.Status.QOSClass = v1.PodQOSBestEffort // set by the API server at creation
	mustSet(t, m, pod, runningStatus(running("c", false)))
	st := runningStatus(running("c", false))
	st.VolumeHealth = []v1.PodVolumeHealth{{Name: "data"}}
	mustSet(t, m, pod, st)
	mustSet(t, m, pod, runningStatus(running("c", true)))
	got, _ := m.GetPodStatus(pod.UID)
	if got.QOSClass != v1.PodQOSBestEffort || len(got.VolumeHealth) != 1 {
		t.Errorf("qosClass %q, volume health %v; want both kept", got.QOSClass, got.VolumeHealth)
	}
}

func TestNormalizedStatusComparesEqual(t *testing.T) {
	m, sink, fc := newTestManager(t, Config{})
	pod := testPod("web", "b", "a")
	st := runningStatus(running("b", false), running("a", false))
	st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(300 * time.Millisecond))
	mustSet(t, m, pod, st)
	got, _ := m.GetPodStatus(pod.UID)
	if got.ContainerStatuses[0].Name != "a" {
		t.Errorf("container statuses not sorted by name: %s first", got.ContainerStatuses[0].Name)
	}
	if ns := got.ContainerStatuses[1].State.Running.StartedAt.Nanosecond(); ns != 0 {
		t.Errorf("startedAt keeps %dns; the API server stores seconds", ns)
	}
	mustSync(t, m)
	sink.takeSets()
	// The same status with a sub-second difference is no change.
	fc.Step(100 * time.Millisecond)
	st.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(700 * time.Millisecond))
	mustSet(t, m, pod, st)
	mustSync(t, m)
	if got := sink.takeSets(); len(got) != 0 {
		t.Errorf("a status equal after rounding was published again")
	}
}

func TestReadinessRecomputesConditions(t *testing.T) {
	m, sink, _ := newTestManager(t, Config{})
	pod := testPod("web", "a", "b")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	st := runningStatus(running("a", false), running("b", false))
	st.Conditions = []v1.PodCondition{{Type: "example.com/lb", Status: v1.ConditionTrue}}
	mustSet(t, m, pod, st)
	mustSync(t, m)
	sink.takeSets()

	if err := m.SetContainerReadiness(pod.UID, nodekit.ContainerID{Type: "fake", ID: "a"}, true); err != nil {
		t.Fatal(err)
	}
	got, _ := m.GetPodStatus(pod.UID)
	cr := condition(got, v1.ContainersReady)
	if cr == nil || cr.Status != v1.ConditionFalse || cr.Reason != podstatus.ReasonContainersNotReady || cr.Message != "containers with unready status: [b]" {
		t.Fatalf("ContainersReady = %+v, want False ContainersNotReady naming b", cr)
	}
	if r := condition(got, v1.PodReady); r == nil || r.Status != v1.ConditionFalse || r.Message != cr.Message {
		t.Fatalf("Ready = %+v, want False like ContainersReady", r)
	}

	if err := m.SetContainerReadiness(pod.UID, nodekit.ContainerID{Type: "fake", ID: "b"}, true); err != nil {
		t.Fatal(err)
	}
	got, _ = m.GetPodStatus(pod.UID)
	if cr := condition(got, v1.ContainersReady); cr.Status != v1.ConditionTrue {
		t.Errorf("ContainersReady = %+v with every container ready", cr)
	}
	if r := condition(got, v1.PodReady); r.Status != v1.ConditionTrue || r.ObservedGeneration != 1 {
		t.Errorf("Ready = %+v with every container ready and the gate true", r)
	}
	mustSync(t, m)
	if n := len(sink.takeSets()); n != 1 {
		t.Errorf("readiness changes published %d statuses, want 1 (the newest)", n)
	}

	// An unchanged readiness is a no-op; unknown pods and containers say so.
	if err := m.SetContainerReadiness(pod.UID, nodekit.ContainerID{Type: "fake", ID: "b"}, true); err != nil {
		t.Errorf("unchanged readiness: %v", err)
	}
	if err := m.SetContainerReadiness("nope", nodekit.ContainerID{Type: "fake", ID: "b"}, true); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("unknown pod: %v, want ErrUnknownPod", err)
	}
	if err := m.SetContainerReadiness(pod.UID, nodekit.ContainerID{Type: "fake", ID: "zz"}, true); !errors.Is(err, ErrUnknownContainer) {
		t.Errorf("unknown container: %v, want ErrUnknownContainer", err)
	}
}

// TestReadinessGate: a readiness change recomputes Ready by the shared
// generator, which tells a gate whose condition is missing from one that is
// not True, and stamps the pod's generation.
func TestReadinessGate(t *testing.T) {
	const lb = v1.PodConditionType("example.com/lb")
	cases := []struct {
		name                string
		gate                *v1.PodCondition
		wantStatus          v1.ConditionStatus
		wantReason, wantMsg string
	}{
		{"missing", nil, v1.ConditionFalse, podstatus.ReasonReadinessGatesNotReady,
			`corresponding condition of pod readiness gate "example.com/lb" does not exist.`},
		{"False", &v1.PodCondition{Type: lb, Status: v1.ConditionFalse}, v1.ConditionFalse, podstatus.ReasonReadinessGatesNotReady,
			`the status of pod readiness gate "example.com/lb" is not "True", but False`},
		{"True", &v1.PodCondition{Type: lb, Status: v1.ConditionTrue}, v1.ConditionTrue, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newTestManager(t, Config{})
			pod := testPod("web", "a")
			pod.Generation = 3
			pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: lb}}
			st := runningStatus(running("a", false))
			if tc.gate != nil {
				st.Conditions = append(st.Conditions, *tc.gate)
			}
			mustSet(t, m, pod, st)
			if err := m.SetContainerReadiness(pod.UID, nodekit.ContainerID{Type: "fake", ID: "a"}, true); err != nil {
				t.Fatal(err)
			}
			got, _ := m.GetPodStatus(pod.UID)
			r := condition(got, v1.PodReady)
			if r == nil || r.Status != tc.wantStatus || r.Reason != tc.wantReason || r.Message != tc.wantMsg || r.ObservedGeneration != 3 {
				t.Errorf("Ready = %+v, want %s %q %q observedGeneration 3", r, tc.wantStatus, tc.wantReason, tc.wantMsg)
			}
		})
	}
}

func TestStartup(t *testing.T) {
	m, _, _ := newTestManager(t, Config{})
	pod := testPod("web", "a")
	mustSet(t, m, pod, runningStatus(running("a", false)))
	if err := m.SetContainerStartup(pod.UID, nodekit.ContainerID{Type: "fake", ID: "a"}, true); err != nil {
		t.Fatal(err)
	}
	got, _ := m.GetPodStatus(pod.UID)
	if s := got.ContainerStatuses[0].Started; s == nil || !*s {
		t.Errorf("started = %v, want true", s)
	}
}

func TestTerminalPodIsNeverReady(t *testing.T) {
	m, _, _ := newTestManager(t, Config{})
	pod := testPod("job", "a")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	st := v1.PodStatus{Phase: v1.PodSucceeded, ContainerStatuses: []v1.ContainerStatus{exited("a", 0)},
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: v1.ContainersReady, Status: v1.ConditionTrue}}}
	mustSet(t, m, pod, st)
	got, _ := m.GetPodStatus(pod.UID)
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		if c := condition(got, typ); c.Status != v1.ConditionFalse || c.Reason != podstatus.ReasonPodCompleted {
			t.Errorf("%s = %+v, want False PodCompleted", typ, c)
		}
	}
}

func TestTerminatePod(t *testing.T) {
	t.Run("running containers", func(t *testing.T) {
		m, _, _ := newTestManager(t, Config{})
		pod := testPod("web", "a", "b")
		mustSet(t, m, pod, runningStatus(running("a", true), exited("b", 0)))
		if err := m.TerminatePod(pod); err != nil {
			t.Fatal(err)
		}
		got, _ := m.GetPodStatus(pod.UID)
		if got.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed", got.Phase)
		}
		a := got.ContainerStatuses[0].State.Terminated
		if a == nil || a.ExitCode != 137 || a.Reason != podstatus.ReasonContainerStatusUnknown {
			t.Errorf("container a = %+v, want terminated 137 ContainerStatusUnknown", got.ContainerStatuses[0].State)
		}
		if b := got.ContainerStatuses[1].State.Terminated; b == nil || b.ExitCode != 0 {
			t.Errorf("container b = %+v, want its own termination kept", got.ContainerStatuses[1].State)
		}
	})
	t.Run("init containers never started", func(t *testing.T) {
		m, _, _ := newTestManager(t, Config{})
		pod := testPod("web", "main")
		pod.Spec.InitContainers = []v1.Container{{Name: "i1"}, {Name: "i2"}}
		st := v1.PodStatus{Phase: v1.PodPending,
			InitContainerStatuses: []v1.ContainerStatus{running("i1", false), waiting("i2")},
			ContainerStatuses:     []v1.ContainerStatus{waiting("main")}}
		mustSet(t, m, pod, st)
		if err := m.TerminatePod(pod); err != nil {
			t.Fatal(err)
		}
		got, _ := m.GetPodStatus(pod.UID)
		if got.InitContainerStatuses[0].State.Terminated == nil {
			t.Errorf("init container i1 (started) not marked terminated")
		}
		if got.InitContainerStatuses[1].State.Waiting == nil {
			t.Errorf("init container i2 (never tried) = %+v, want waiting kept", got.InitContainerStatuses[1].State)
		}
		if got.ContainerStatuses[0].State.Waiting == nil {
			t.Errorf("main container of an uninitialized pod = %+v, want waiting kept", got.ContainerStatuses[0].State)
		}
		if got.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed", got.Phase)
		}
	})
	t.Run("static pod keeps its phase", func(t *testing.T) {
		m, _, _ := newTestManager(t, Config{})
		pod := testPod("etcd-node1", "a")
		pod.Annotations[annotationConfigSource] = "file"
		mustSet(t, m, pod, runningStatus(running("a", true)))
		if err := m.TerminatePod(pod); err != nil {
			t.Fatal(err)
		}
		if got, _ := m.GetPodStatus(pod.UID); got.Phase != v1.PodRunning {
			t.Errorf("static pod phase = %s, want Running kept", got.Phase)
		}
	})
	t.Run("nil pod", func(t *testing.T) {
		m, _, _ := newTestManager(t, Config{})
		if err := m.TerminatePod(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("TerminatePod(nil) = %v, want ErrInvalid", err)
		}
	})
}

func TestResync(t *testing.T) {
	t.Run("without a pod getter every status is republished", func(t *testing.T) {
		m, sink, _ := newTestManager(t, Config{})
		mustSet(t, m, testPod("a", "c"), runningStatus(running("c", false)))
		mustSet(t, m, testPod("b", "c"), runningStatus(running("c", false)))
		mustSync(t, m)
		sink.takeSets()
		if err := m.Resync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := sink.takeSets(); len(got) != 2 || got[0].name != "a" || got[1].name != "b" {
			t.Errorf("resync published %+v, want a and b in order", got)
		}
	})
	t.Run("with a pod getter only differing statuses", func(t *testing.T) {
		api := map[types.UID]*v1.Pod{}
		m, sink, _ := newTestManager(t, Config{Pods: PodGetterFunc(func(uid types.UID) (*v1.Pod, bool) { p, ok := api[uid]; return p, ok })})
		for _, name := range []string{"a", "b"} {
			mustSet(t, m, testPod(name, "c"), runningStatus(running("c", false)))
		}
		mustSync(t, m)
		for _, s := range sink.takeSets() {
			p := testPod(s.name, "c")
			p.Status = s.status
			api[s.uid] = p
		}
		api["b-uid"].Status.Phase = v1.PodPending // overwritten by someone
		if err := m.Resync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := sink.takeSets(); len(got) != 1 || got[0].name != "b" || got[0].status.Phase != v1.PodRunning {
			t.Errorf("resync published %+v, want only b, back to Running", got)
		}
	})
}

func TestRemoveOrphanedStatuses(t *testing.T) {
	m, _, _ := newTestManager(t, Config{})
	for _, name := range []string{"a", "b", "c"} {
		mustSet(t, m, testPod(name, "x"), runningStatus(running("x", false)))
	}
	m.RemoveOrphanedStatuses(map[types.UID]bool{"b-uid": true})
	for name, want := range map[string]bool{"a": false, "b": true, "c": false} {
		if _, ok := m.GetPodStatus(types.UID(name + "-uid")); ok != want {
			t.Errorf("pod %s known = %v, want %v", name, ok, want)
		}
	}
	if err := m.PodResourcesReclaimed("a-uid"); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("PodResourcesReclaimed of a removed pod = %v, want ErrUnknownPod", err)
	}
}

func TestRunPublishesOnChangeAndResyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, sink, fc := newTestManager(t, Config{ResyncInterval: 10 * time.Second})
		stop := startInBubble(t, m.Run)
		defer stop()
		step := stepper(fc)

		mustSet(t, m, testPod("a", "c"), runningStatus(running("c", false)))
		synctest.Wait()
		if got := sink.takeSets(); len(got) != 1 {
			t.Fatalf("Run published %d statuses after a change, want 1", len(got))
		}
		step(9 * time.Second)
		if got := sink.takeSets(); len(got) != 0 {
			t.Fatalf("Run republished before the resync interval: %+v", got)
		}
		step(time.Second)
		if got := sink.takeSets(); len(got) != 1 {
			t.Fatalf("resync published %d statuses, want 1", len(got))
		}
	})
}

func TestRunRetriesFailuresWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, sink, fc := newTestManager(t, Config{ResyncInterval: time.Hour})
		sink.failSet = 3
		stop := startInBubble(t, m.Run)
		defer stop()
		step := stepper(fc)

		mustSet(t, m, testPod("a", "c"), runningStatus(running("c", false)))
		synctest.Wait() // first attempt fails
		for i, wait := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
			step(wait - time.Millisecond)
			if got := sink.takeSets(); len(got) != 0 {
				t.Fatalf("attempt %d before its %v back-off", i+2, wait)
			}
			step(time.Millisecond)
		}
		if got := sink.takeSets(); len(got) != 1 {
			t.Fatalf("published %d statuses after three failures, want 1", len(got))
		}
		step(30 * time.Second)
		if got := sink.takeSets(); len(got) != 0 {
			t.Fatalf("retries went on after a success: %+v", got)
		}
	})
}

func TestManagerBadInput(t *testing.T) {
	if _, err := NewManager(Config{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewManager without a sink = %v, want ErrInvalid", err)
	}
	m, _, _ := newTestManager(t, Config{})
	noUID := testPod("x")
	noUID.UID = ""
	for name, err := range map[string]error{
		"nil pod": m.SetPodStatus(nil, v1.PodStatus{}),
		"no uid":  m.SetPodStatus(noUID, v1.PodStatus{}),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func BenchmarkSetPodStatus(b *testing.B) {
	sink := &recordingSink{}
	m, err := NewManager(Config{Sink: sink, Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*v1.Pod, 110)
	for i := range pods {
		pods[i] = testPod(fmt.Sprintf("p%d", i), "a", "b")
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := pods[i%len(pods)]
		if err := m.SetPodStatus(p, runningStatus(running("a", i%2 == 0), running("b", true))); err != nil {
			b.Fatal(err)
		}
	}
}

// pointerSink records the pod objects it is given.
type pointerSink struct {
	recordingSink
	pods []*v1.Pod
}

func (s *pointerSink) SetPodStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	s.pods = append(s.pods, pod)
	return s.recordingSink.SetPodStatus(ctx, pod, st)
}

// TestSharePods: with SharePods the manager keeps the pod it was given (the
// sink gets that very object), without it a copy that a later change of the
// caller's pod does not reach.
func TestSharePods(t *testing.T) {
	for _, share := range []bool{false, true} {
		sink := &pointerSink{}
		m, _, _ := newTestManager(t, Config{Sink: sink, SharePods: share})
		pod := testPod("p", "c")
		mustSet(t, m, pod, runningStatus(running("c", false)))
		mustSync(t, m)
		if len(sink.pods) != 1 {
			t.Fatalf("share=%v: %d writes, want 1", share, len(sink.pods))
		}
		if got := sink.pods[0] == pod; got != share {
			t.Errorf("share=%v: the sink got the caller's pod object: %v", share, got)
		}
		if !share {
			pod.Name = "changed"
			if err := m.SetContainerReadiness(pod.UID, nodekit.ContainerID{Type: "fake", ID: "c"}, true); err != nil {
				t.Fatal(err)
			}
			mustSync(t, m)
			if got := sink.pods[1].Name; got != "p" {
				t.Errorf("the copy followed a change of the caller's pod: name %q", got)
			}
		}
	}
}

// hookSink calls before ahead of each write it records.
type hookSink struct {
	recordingSink
	before func(pod *v1.Pod)
}

func (s *hookSink) SetPodStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	if s.before != nil {
		s.before(pod)
	}
	return s.recordingSink.SetPodStatus(ctx, pod, st)
}

// TestSyncWritesTheNewestStatus: a pod whose status changes while a sync
// writes the pods before it gets its newest status written, once, not the
// one the sync was planned with and the newer one in the next sync.
func TestSyncWritesTheNewestStatus(t *testing.T) {
	sink := &hookSink{}
	m, _, _ := newTestManager(t, Config{Sink: sink})
	a, b := testPod("a", "c"), testPod("b", "c")
	pending := v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{waiting("c")}}
	mustSet(t, m, a, pending)
	mustSet(t, m, b, pending)
	sink.before = func(pod *v1.Pod) {
		if pod.Name == "a" {
			// While a's write waits on the sink, b starts.
			mustSet(t, m, b, runningStatus(running("c", true)))
		}
	}
	mustSync(t, m)
	sets := sink.takeSets()
	if len(sets) != 2 || sets[0].name != "a" || sets[1].name != "b" {
		t.Fatalf("writes %v, want a's then b's", sets)
	}
	if got := sets[0].status.Phase; got != v1.PodPending {
		t.Errorf("a written as %s, want Pending", got)
	}
	if got := sets[1].status.Phase; got != v1.PodRunning {
		t.Errorf("b written as %s, want Running, its status at the time of its write", got)
	}
	sink.before = nil
	mustSync(t, m)
	if sets := sink.takeSets(); len(sets) != 0 {
		t.Errorf("the next sync wrote %v again; b's newest status was already written", sets)
	}
	mustSet(t, m, a, runningStatus(running("c", false)))
	mustSync(t, m)
	if sets := sink.takeSets(); len(sets) != 1 || sets[0].name != "a" || sets[0].status.Phase != v1.PodRunning {
		t.Errorf("after a's change, writes %v, want a's Running status", sets)
	}
}
