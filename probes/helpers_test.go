package probes

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

var (
	_ Execer        = (*fakeExec)(nil)
	_ StatusGetter  = (*fakeStatus)(nil)
	_ EventRecorder = (*fakeEvents)(nil)
)

// epoch is where the fake clocks of these tests start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeStatus is a StatusGetter backed by a map.
type fakeStatus struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func newFakeStatus() *fakeStatus { return &fakeStatus{m: map[types.UID]v1.PodStatus{}} }

func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.m[uid]
	return *st.DeepCopy(), ok
}

func (f *fakeStatus) set(uid types.UID, st v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[uid] = st
}

// fakeExec answers every ExecSync with its current exit code, output and
// error, and counts the calls.
type fakeExec struct {
	mu    sync.Mutex
	code  int
	out   string
	err   error
	calls []string
}

func (f *fakeExec) ExecSync(_ context.Context, id nodekit.ContainerID, cmd []string, _ time.Duration) ([]byte, []byte, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %v", id.ID, cmd))
	return []byte(f.out), nil, f.code, f.err
}

func (f *fakeExec) answer(code int, out string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.code, f.out, f.err = code, out, err
}

func (f *fakeExec) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// fakeEvents records events as "Type Reason Message".
type fakeEvents struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeEvents) Eventf(obj runtime.Object, typ, reason, format string, args ...interface{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, typ+" "+reason+" "+fmt.Sprintf(format, args...))
}

func (f *fakeEvents) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

type fixture struct {
	m      *Manager
	clk    *clocktesting.FakeClock
	status *fakeStatus
	exec   *fakeExec
	events *fakeEvents
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{
		clk: clocktesting.NewFakeClock(epoch), status: newFakeStatus(),
		exec: &fakeExec{}, events: &fakeEvents{},
	}
	m, err := NewManager(Config{Status: f.status, Execer: f.exec, Recorder: f.events, Clock: f.clk})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// worker registers a worker for the pod's container "app" without
// starting it: the test drives its step.
func (f *fixture) worker(pod *v1.Pod, kind Kind) *worker {
	c := &pod.Spec.Containers[0]
	key := workerKey{uid: pod.UID, container: c.Name, kind: kind}
	w := newWorker(f.m, key, pod, c)
	f.m.mu.Lock()
	f.m.workers[key] = w
	f.m.mu.Unlock()
	return w
}

// running publishes that container "app" of pod runs as id since started.
func (f *fixture) running(pod *v1.Pod, id string, started time.Time) {
	f.status.set(pod.UID, v1.PodStatus{
		Phase: v1.PodRunning, PodIP: "127.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: "containerd://" + id,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
		}},
	})
}

// exited publishes that container "app" of pod, id, exited with code.
func (f *fixture) exited(pod *v1.Pod, id string, code int32) {
	f.status.set(pod.UID, v1.PodStatus{
		Phase: v1.PodRunning,
		ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: "containerd://" + id,
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}},
		}},
	})
}

func (f *fixture) result(kind Kind, id string) (Result, bool) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	e, ok := f.m.results[resultKey{kind: kind, id: cid(id)}]
	return e.result, ok
}

func cid(id string) nodekit.ContainerID { return nodekit.ContainerID{Type: "containerd", ID: id} }

func execProbe(mod func(*v1.Probe)) *v1.Probe {
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}}}
	if mod != nil {
		mod(p)
	}
	return p
}

// testPod is a pod with one container "app" with the given probes.
func testPod(uid string, liveness, readiness, startup *v1.Probe) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			Containers: []v1.Container{{
				Name: "app", Image: "busybox",
				LivenessProbe: liveness, ReadinessProbe: readiness, StartupProbe: startup,
			}},
		},
	}
}
