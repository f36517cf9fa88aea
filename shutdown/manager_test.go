package shutdown

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type kill struct {
	pod    string
	grace  int64
	status v1.PodStatus
}

// fakeKiller records kills; a pod named in block has its kill wait until
// its channel is closed or ctx is done.
type fakeKiller struct {
	mu    sync.Mutex
	kills []kill
	block map[string]chan struct{}
}

var _ PodKiller = (*fakeKiller)(nil)

func (f *fakeKiller) KillPod(ctx context.Context, pod *v1.Pod, grace int64, status func(*v1.PodStatus)) error {
	st := pod.Status.DeepCopy()
	status(st)
	f.mu.Lock()
	f.kills = append(f.kills, kill{pod: pod.Name, grace: grace, status: *st})
	ch := f.block[pod.Name]
	f.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// killed returns the pods killed so far, sorted, with their grace periods.
func (f *fakeKiller) killed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, k := range f.kills {
		out = append(out, fmt.Sprintf("%s=%d", k.pod, k.grace))
	}
	slices.Sort(out)
	return out
}

func (f *fakeKiller) statusOf(name string) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.kills {
		if k.pod == name {
			return k.status, true
		}
	}
	return v1.PodStatus{}, false
}

func testPod(name string, prio *int32, tgps int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Generation: 3},
		Spec:       v1.PodSpec{Priority: prio, TerminationGracePeriodSeconds: ptr.To(tgps)},
		Status:     v1.PodStatus{Phase: v1.PodRunning},
	}
}

// testPods: three pods in the default group (one static, without a
// priority, as upstream groups it) and a critical one.
func testPods() []*v1.Pod {
	static := testPod("static", nil, 30)
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	return []*v1.Pod{
		testPod("dns", ptr.To[int32](SystemCriticalPriority+1000), 30),
		testPod("web", nil, 60),
		testPod("batch", ptr.To[int32](1000), 5),
		static,
	}
}

func newTestManager(t *testing.T, groups []Group, pods []*v1.Pod, k PodKiller, clk *clocktesting.FakeClock) *Manager {
	t.Helper()
	m, err := New(Config{Groups: groups, ActivePods: func() []*v1.Pod { return pods }, Killer: k, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// The default group is stopped first, each pod with min(own, 20); the
// critical pod only once the group is done, with min(30, 10).
func TestShutdownOrderAndGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &fakeKiller{block: map[string]chan struct{}{"web": make(chan struct{})}}
		groups, err := Groups(GracePeriodConfig{ShutdownGracePeriod: 30 * time.Second, ShutdownGracePeriodCriticalPods: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		m := newTestManager(t, groups, testPods(), k, clocktesting.NewFakeClock(t0))
		done := make(chan error, 1)
		go func() { done <- m.Shutdown(t.Context()) }()
		synctest.Wait()
		if !m.ShuttingDown() {
			t.Error("not shutting down during Shutdown")
		}
		eq(t, "kills while web stops", k.killed(), []string{"batch=5", "static=20", "web=20"})
		close(k.block["web"])
		synctest.Wait()
		eq(t, "kills", k.killed(), []string{"batch=5", "dns=10", "static=20", "web=20"})
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Shutdown has not returned")
		}
	})
}

// A group whose pods do not stop holds the next group back for its period
// and no longer.
func TestShutdownGroupTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		k := &fakeKiller{block: map[string]chan struct{}{"web": make(chan struct{}), "dns": make(chan struct{})}}
		clk := clocktesting.NewFakeClock(t0)
		groups := []Group{{0, 20}, {SystemCriticalPriority, 10}}
		m := newTestManager(t, groups, testPods(), k, clk)
		done := make(chan error, 1)
		go func() { done <- m.Shutdown(ctx) }()
		synctest.Wait()
		clk.Step(19 * time.Second)
		synctest.Wait()
		eq(t, "kills at 19s", k.killed(), []string{"batch=5", "static=20", "web=20"})
		clk.Step(time.Second)
		synctest.Wait()
		eq(t, "kills at 20s", k.killed(), []string{"batch=5", "dns=10", "static=20", "web=20"})
		clk.Step(10 * time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Shutdown has not returned once every period is over")
		}
		cancel() // the stuck kills give up
	})
}

// A group with no time left is killed with grace 0 and not waited for.
func TestShutdownZeroPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		k := &fakeKiller{block: map[string]chan struct{}{"dns": make(chan struct{})}}
		groups, _ := Groups(GracePeriodConfig{ShutdownGracePeriod: 30 * time.Second})
		m := newTestManager(t, groups, testPods(), k, clocktesting.NewFakeClock(t0))
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		eq(t, "kills", k.killed(), []string{"batch=5", "dns=0", "static=30", "web=30"})
		cancel()
	})
}

// With a CleanupChecker, the next group waits for the pods to be cleaned
// up (polled each second), within the group's period.
func TestShutdownWaitsForCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &fakeKiller{}
		clk := clocktesting.NewFakeClock(t0)
		var mu sync.Mutex
		clean := false
		pods := testPods()
		m, err := New(Config{
			Groups:     []Group{{0, 20}, {SystemCriticalPriority, 10}},
			ActivePods: func() []*v1.Pod { return pods },
			Killer:     k,
			Cleanup: CleanupFunc(func(_ context.Context, p *v1.Pod) bool {
				mu.Lock()
				defer mu.Unlock()
				return clean || p.Name != "web"
			}),
			Clock: clk,
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Shutdown(t.Context()) }()
		synctest.Wait()
		clk.Step(time.Second)
		synctest.Wait()
		eq(t, "kills before cleanup", k.killed(), []string{"batch=5", "static=20", "web=20"})
		mu.Lock()
		clean = true
		mu.Unlock()
		clk.Step(time.Second)
		synctest.Wait()
		eq(t, "kills after cleanup", k.killed(), []string{"batch=5", "dns=10", "static=20", "web=20"})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestShutdownCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		k := &fakeKiller{block: map[string]chan struct{}{"web": make(chan struct{})}}
		m := newTestManager(t, []Group{{0, 20}, {SystemCriticalPriority, 10}}, testPods(), k, clocktesting.NewFakeClock(t0))
		done := make(chan error, 1)
		go func() { done <- m.Shutdown(ctx) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v, want context.Canceled", err)
		}
		eq(t, "kills", k.killed(), []string{"batch=5", "static=20", "web=20"})
	})
}

func TestTerminatedStatus(t *testing.T) {
	k := &fakeKiller{}
	clk := clocktesting.NewFakeClock(t0)
	pods := testPods()
	succeeded := testPod("done", nil, 30)
	succeeded.Status.Phase = v1.PodSucceeded
	earlier := metav1.NewTime(t0.Add(-time.Hour))
	marked := testPod("marked", nil, 30)
	marked.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionTrue},
		{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "Other", LastTransitionTime: earlier},
	}
	m := newTestManager(t, []Group{{0, 1}}, append(pods, succeeded, marked), k, clk)
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, ok := k.statusOf("web")
	if !ok {
		t.Fatal("web not killed")
	}
	want := v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  "Terminated",
		Message: "Pod was terminated in response to imminent node shutdown.",
		Conditions: []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, ObservedGeneration: 3,
			Reason: "TerminationByKubelet", Message: "Pod was terminated in response to imminent node shutdown.",
			LastTransitionTime: metav1.NewTime(t0),
		}},
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("status\n got %+v\nwant %+v", st, want)
	}
	if st, _ := k.statusOf("done"); st.Phase != v1.PodSucceeded || st.Reason != ReasonTerminated {
		t.Errorf("succeeded pod: phase %s reason %q, want Succeeded Terminated", st.Phase, st.Reason)
	}
	st, _ = k.statusOf("marked")
	if len(st.Conditions) != 2 || st.Conditions[1].Reason != v1.PodReasonTerminationByKubelet ||
		!st.Conditions[1].LastTransitionTime.Equal(&earlier) || st.Conditions[0].Type != v1.PodReady {
		t.Errorf("existing DisruptionTarget: conditions %+v", st.Conditions)
	}
}

func TestAdmitAndReady(t *testing.T) {
	m := newTestManager(t, []Group{{0, 1}}, nil, &fakeKiller{}, clocktesting.NewFakeClock(t0))
	req := nodekit.AdmitRequest{Pod: testPod("new", nil, 30)}
	if d := m.Admit(t.Context(), req); !d.Admit {
		t.Errorf("before shutdown: %+v, want admitted", d)
	}
	if err := m.Ready(t.Context()); err != nil {
		t.Errorf("Ready before shutdown = %v", err)
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := nodekit.Decision{Reason: "NodeShutdown", Message: "Pod was rejected as the node is shutting down."}
	if d := m.Admit(t.Context(), req); d != want {
		t.Errorf("during shutdown: %+v, want %+v", d, want)
	}
	if err := m.Ready(t.Context()); err == nil || err.Error() != "node is shutting down" {
		t.Errorf("Ready during shutdown = %v, want \"node is shutting down\"", err)
	}
}

func TestNew(t *testing.T) {
	pods := func() []*v1.Pod { return nil }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Killer: &fakeKiller{}}, "shutdown: Config.ActivePods is required"},
		{Config{ActivePods: pods}, "shutdown: Config.Killer is required"},
		{Config{ActivePods: pods, Killer: &fakeKiller{}, Groups: []Group{{1, 2}, {1, 3}}}, "shutdown: Groups[1].priority 1 repeats Groups[0]"},
		{Config{ActivePods: pods, Killer: &fakeKiller{}, Groups: []Group{{1, -2}}}, "shutdown: Groups[0].shutdownGracePeriodSeconds -2 must not be negative"},
	} {
		if _, err := New(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("New = %v, want %q", err, tc.want)
		}
	}
	// Groups are sorted; the caller's slice is left alone.
	in := []Group{{SystemCriticalPriority, 10}, {0, 20}}
	m, err := New(Config{ActivePods: pods, Killer: &fakeKiller{}, Groups: in})
	if err != nil {
		t.Fatal(err)
	}
	if m.groups[0].Priority != 0 || in[0].Priority != SystemCriticalPriority {
		t.Errorf("groups %v, input %v", m.groups, in)
	}
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) Eventf(_ runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, eventtype+" "+reason+" "+fmt.Sprintf(messageFmt, args...))
}

// fakeTrigger hands out a channel the test writes to and counts releases.
type fakeTrigger struct {
	ch       chan bool
	released chan struct{}
}

func (f *fakeTrigger) Watch(context.Context) (<-chan bool, error) { return f.ch, nil }
func (f *fakeTrigger) Release(context.Context) error {
	f.released <- struct{}{}
	return nil
}

var (
	_ Trigger  = (*fakeTrigger)(nil)
	_ Releaser = (*fakeTrigger)(nil)
)

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		k := &fakeKiller{}
		rec := &fakeRecorder{}
		synced := make(chan struct{}, 1)
		pods := testPods()
		m, err := New(Config{
			Groups:     []Group{{0, 20}, {SystemCriticalPriority, 10}},
			ActivePods: func() []*v1.Pod { return pods },
			Killer:     k,
			SyncNodeStatus: func(context.Context) error {
				synced <- struct{}{}
				return nil
			},
			Events:  rec,
			NodeRef: &v1.ObjectReference{Kind: "Node", Name: "n1"},
			Clock:   clocktesting.NewFakeClock(t0),
		})
		if err != nil {
			t.Fatal(err)
		}
		tr := &fakeTrigger{ch: make(chan bool), released: make(chan struct{}, 1)}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx, tr) }()
		tr.ch <- true
		<-tr.released
		<-synced
		if !m.ShuttingDown() {
			t.Error("not shutting down after a shutdown event")
		}
		eq(t, "kills", k.killed(), []string{"batch=5", "dns=10", "static=20", "web=20"})
		tr.ch <- false
		synctest.Wait()
		if m.ShuttingDown() {
			t.Error("still shutting down after a cancellation")
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
		eq(t, "events", rec.events, []string{
			"Normal NodeShutdown Shutdown manager detected shutdown event",
			"Normal NodeShutdown Shutdown manager detected shutdown cancellation",
		})
	})
}

type closingTrigger struct{}

func (closingTrigger) Watch(context.Context) (<-chan bool, error) {
	ch := make(chan bool)
	close(ch)
	return ch, nil
}

func TestRunTriggerEnds(t *testing.T) {
	m := newTestManager(t, []Group{{0, 1}}, nil, &fakeKiller{}, clocktesting.NewFakeClock(t0))
	if err := m.Run(t.Context(), closingTrigger{}); err == nil {
		t.Error("Run = nil after the trigger stopped, want an error")
	}
}

// Without groups, Run neither watches nor shuts down.
func TestRunDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, nil, testPods(), &fakeKiller{}, clocktesting.NewFakeClock(t0))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx, nil) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
}
