package syncloop_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/syncloop"
)

// fakeStatus is a minimal StatusManager: it keeps the last status per pod.
type fakeStatus struct {
	mu        sync.Mutex
	statuses  map[types.UID]v1.PodStatus
	reclaimed map[types.UID]int
	versions  []string // label "v" of each pod SetPodStatus was given
}

func newFakeStatus() *fakeStatus {
	return &fakeStatus{statuses: map[types.UID]v1.PodStatus{}, reclaimed: map[types.UID]int{}}
}

func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.statuses[uid]
	return s, ok
}

func (f *fakeStatus) SetPodStatus(pod *v1.Pod, s v1.PodStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[pod.UID] = s
	f.versions = append(f.versions, pod.Labels["v"])
	return nil
}

func (f *fakeStatus) PodResourcesReclaimed(uid types.UID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reclaimed[uid]++
	return nil
}

func (f *fakeStatus) get(t *testing.T, uid types.UID) v1.PodStatus {
	t.Helper()
	s, ok := f.GetPodStatus(uid)
	if !ok {
		t.Fatalf("no status for pod %s", uid)
	}
	return s
}

// node is a running loop on the fake runtime, inside a synctest bubble:
// time.Sleep advances the fake time and synctest.Wait lets every goroutine
// settle, so tests are deterministic and take milliseconds.
type node struct {
	rt      *agenttest.FakeRuntime
	status  *fakeStatus
	updates chan nodekit.PodUpdate
	loop    *syncloop.Loop
	ready   bool
	mu      sync.Mutex
	health  error
}

func startNode(t *testing.T, rt nodekit.Runtime, fake *agenttest.FakeRuntime, admitters ...nodekit.Admitter) *node {
	t.Helper()
	return startNodeWith(t, rt, fake, nil, admitters...)
}

// startNodeWith is startNode with a last say on the loop's Config.
func startNodeWith(t *testing.T, rt nodekit.Runtime, fake *agenttest.FakeRuntime, edit func(*syncloop.Config), admitters ...nodekit.Admitter) *node {
	t.Helper()
	n := &node{rt: fake, status: newFakeStatus(), updates: make(chan nodekit.PodUpdate, 100), ready: true}
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clock.RealClock{}})
	cfg := syncloop.Config{
		Runtime: rt, Cache: cache, Status: n.status, Updates: n.updates, Events: g.Events(),
		RootDir: t.TempDir(), NodeIPs: []string{"192.0.2.10"}, Admitters: admitters,
		SourcesReady: func() bool { n.mu.Lock(); defer n.mu.Unlock(); return n.ready },
		Health: func(context.Context) error {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.health != nil {
				return n.health
			}
			return g.Healthy()
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	loop, err := syncloop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.loop = loop
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = g.Run(ctx) }()
	go func() { _ = loop.Run(ctx) }()
	return n
}

func (n *node) send(op nodekit.Op, pods ...*v1.Pod) {
	n.updates <- nodekit.PodUpdate{Op: op, Pods: pods, Source: nodekit.SourceAPI}
}

// settle lets d of fake time pass and everything react to it.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func pod(uid string, policy v1.RestartPolicy, containers ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid), CreationTimestamp: metav1.Now()},
		Spec:       v1.PodSpec{RestartPolicy: policy},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "busybox"})
	}
	return p
}

func containerState(t *testing.T, s v1.PodStatus, name string) v1.ContainerStatus {
	t.Helper()
	for _, c := range append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no status for container %s in %+v", name, s)
	return v1.ContainerStatus{}
}

func condition(s v1.PodStatus, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func TestPodRunsThenSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyNever, "app")
		n.send(nodekit.ADD, p)
		settle(3 * time.Second)

		s := n.status.get(t, "u1")
		if s.Phase != v1.PodRunning || s.PodIP == "" || s.HostIP != "192.0.2.10" || s.StartTime == nil || s.QOSClass != v1.PodQOSBestEffort {
			t.Fatalf("running status wrong: %+v", s)
		}
		cs := containerState(t, s, "app")
		if cs.State.Running == nil || !cs.Ready || cs.ContainerID == "" {
			t.Fatalf("container status: %+v", cs)
		}
		if condition(s, v1.PodReady) != v1.ConditionTrue || condition(s, v1.PodReadyToStartContainers) != v1.ConditionTrue {
			t.Fatalf("conditions: %+v", s.Conditions)
		}

		if err := rt.ExitContainer("u1", "app", 0); err != nil {
			t.Fatal(err)
		}
		settle(3 * time.Second)
		s = n.status.get(t, "u1")
		if s.Phase != v1.PodSucceeded {
			t.Fatalf("phase = %s, want Succeeded", s.Phase)
		}
		if cs := containerState(t, s, "app"); cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
			t.Fatalf("terminated state: %+v", cs.State)
		}
		if condition(s, v1.PodReady) != v1.ConditionFalse {
			t.Fatalf("Ready after completion: %+v", s.Conditions)
		}
	})
}

func TestNeverPodFailsWithExitCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		n.send(nodekit.ADD, pod("u1", v1.RestartPolicyNever, "app"))
		settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "app", 3)
		settle(3 * time.Second)
		s := n.status.get(t, "u1")
		cs := containerState(t, s, "app")
		if s.Phase != v1.PodFailed || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.State.Terminated.Reason != "Error" {
			t.Fatalf("status = %s %+v", s.Phase, cs.State)
		}
		if cs.RestartCount != 0 {
			t.Fatalf("a Never container was restarted: %d", cs.RestartCount)
		}
	})
}

func TestCrashLoopBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		n.send(nodekit.ADD, pod("u1", v1.RestartPolicyAlways, "app"))
		settle(2 * time.Second)

		// The first exit restarts at once.
		_ = rt.ExitContainer("u1", "app", 1)
		settle(2 * time.Second)
		cs := containerState(t, n.status.get(t, "u1"), "app")
		if cs.RestartCount != 1 || cs.State.Running == nil {
			t.Fatalf("after first exit: restarts=%d state=%+v", cs.RestartCount, cs.State)
		}
		// The second exit waits 10 s in CrashLoopBackOff.
		_ = rt.ExitContainer("u1", "app", 1)
		settle(2 * time.Second)
		cs = containerState(t, n.status.get(t, "u1"), "app")
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || !strings.Contains(cs.State.Waiting.Message, "back-off 10s") {
			t.Fatalf("want CrashLoopBackOff 10s, have %+v", cs.State)
		}
		if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
			t.Fatalf("last state: %+v", cs.LastTerminationState)
		}
		settle(6 * time.Second) // 8 s after the exit: still waiting
		if cs = containerState(t, n.status.get(t, "u1"), "app"); cs.RestartCount != 1 {
			t.Fatalf("restarted before the back-off ended: %d", cs.RestartCount)
		}
		settle(4 * time.Second) // 12 s: restarted
		if cs = containerState(t, n.status.get(t, "u1"), "app"); cs.RestartCount != 2 || cs.State.Running == nil {
			t.Fatalf("not restarted after the back-off: %+v", cs)
		}
		// The next wait doubles.
		_ = rt.ExitContainer("u1", "app", 1)
		settle(2 * time.Second)
		cs = containerState(t, n.status.get(t, "u1"), "app")
		if cs.State.Waiting == nil || !strings.Contains(cs.State.Waiting.Message, "back-off 20s") {
			t.Fatalf("want back-off 20s, have %+v", cs.State)
		}
		settle(15 * time.Second)
		if cs = containerState(t, n.status.get(t, "u1"), "app"); cs.RestartCount != 2 {
			t.Fatalf("restarted after 17s of a 20s back-off")
		}
		settle(5 * time.Second)
		if cs = containerState(t, n.status.get(t, "u1"), "app"); cs.RestartCount != 3 {
			t.Fatalf("not restarted after 22s: %+v", cs)
		}
	})
}

func TestInitContainersRunInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyNever, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "busybox"}, {Name: "init2", Image: "busybox"}}
		n.send(nodekit.ADD, p)
		settle(2 * time.Second)

		s := n.status.get(t, "u1")
		if s.Phase != v1.PodPending || condition(s, v1.PodInitialized) != v1.ConditionFalse {
			t.Fatalf("while init1 runs: %s %+v", s.Phase, s.Conditions)
		}
		if w := containerState(t, s, "init2").State.Waiting; w == nil || w.Reason != "PodInitializing" || containerState(t, s, "app").State.Waiting.Reason != "PodInitializing" {
			t.Fatalf("init2/app started early: %+v", s)
		}
		_ = rt.ExitContainer("u1", "init1", 0)
		settle(2 * time.Second)
		s = n.status.get(t, "u1")
		if containerState(t, s, "init2").State.Running == nil || containerState(t, s, "app").State.Running != nil {
			t.Fatalf("after init1: %+v", s)
		}
		_ = rt.ExitContainer("u1", "init2", 0)
		settle(2 * time.Second)
		s = n.status.get(t, "u1")
		if s.Phase != v1.PodRunning || containerState(t, s, "app").State.Running == nil || condition(s, v1.PodInitialized) != v1.ConditionTrue {
			t.Fatalf("after init: %s %+v", s.Phase, s)
		}
	})
}

func TestFailingInitContainerBlocksApp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyNever, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
		n.send(nodekit.ADD, p)
		settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "init", 1)
		settle(3 * time.Second)
		s := n.status.get(t, "u1")
		if s.Phase != v1.PodFailed {
			t.Fatalf("phase = %s, want Failed", s.Phase)
		}
		if app := containerState(t, s, "app"); app.State.Running != nil || app.ContainerID != "" {
			t.Fatalf("app ran despite the failed init container: %+v", app)
		}
	})
}

func TestSidecarRunsAlongside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		always := v1.ContainerRestartPolicyAlways
		p := pod("u1", v1.RestartPolicyNever, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "sidecar", Image: "busybox", RestartPolicy: &always}}
		n.send(nodekit.ADD, p)
		settle(4 * time.Second)
		s := n.status.get(t, "u1")
		if containerState(t, s, "sidecar").State.Running == nil || containerState(t, s, "app").State.Running == nil || s.Phase != v1.PodRunning {
			t.Fatalf("sidecar and app should both run: %+v", s)
		}
		// The app finishing ends the pod; the sidecar is stopped with it.
		_ = rt.ExitContainer("u1", "app", 0)
		settle(4 * time.Second)
		s = n.status.get(t, "u1")
		if s.Phase != v1.PodSucceeded {
			t.Fatalf("phase = %s, want Succeeded", s.Phase)
		}
		if st, _ := rt.GetPodStatus(context.Background(), "u1", "", ""); st.FindContainer("sidecar").State == nodekit.StateRunning {
			t.Fatal("sidecar still running after the pod completed")
		}
	})
}

func TestDeleteTerminatesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyAlways, "app")
		n.send(nodekit.ADD, p)
		settle(2 * time.Second)

		del := p.DeepCopy()
		now := metav1.Now()
		grace := int64(30)
		del.DeletionTimestamp, del.DeletionGracePeriodSeconds = &now, &grace
		for i := 0; i < 5; i++ {
			n.send(nodekit.DELETE, del)
		}
		settle(3 * time.Second)
		n.send(nodekit.UPDATE, del)
		settle(3 * time.Second)

		kills := 0
		for _, c := range rt.Calls() {
			if strings.HasPrefix(c, "KillPod") {
				kills++
			}
		}
		if kills != 1 {
			t.Fatalf("KillPod called %d times, want 1: %v", kills, rt.Calls())
		}
		if n.status.reclaimed["u1"] != 1 {
			t.Fatalf("resources reclaimed %d times, want 1", n.status.reclaimed["u1"])
		}
		s := n.status.get(t, "u1")
		if s.Phase != v1.PodFailed && s.Phase != v1.PodSucceeded {
			t.Fatalf("deleted pod not terminal: %s", s.Phase)
		}
		// A terminating pod never syncs (starts containers) again.
		syncs := 0
		for _, c := range rt.Calls() {
			if strings.HasPrefix(c, "SyncPod") {
				syncs++
			}
		}
		settle(70 * time.Second)
		after := 0
		for _, c := range rt.Calls() {
			if strings.HasPrefix(c, "SyncPod") {
				after++
			}
		}
		if after != syncs {
			t.Fatalf("SyncPod ran %d more times after termination", after-syncs)
		}
	})
}

// gatedRuntime blocks SyncPod until released, to hold a worker busy.
type gatedRuntime struct {
	*agenttest.FakeRuntime
	gate chan struct{}
}

func (g *gatedRuntime) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	<-g.gate
	return g.FakeRuntime.SyncPod(ctx, req)
}

func TestUpdatesAreCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeRuntime(clock.RealClock{})
		rt := &gatedRuntime{FakeRuntime: fake, gate: make(chan struct{})}
		n := startNode(t, rt, fake)
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Labels = map[string]string{"v": "0"}
		n.send(nodekit.ADD, p)
		settle(1500 * time.Millisecond) // the first SyncPod is now blocked
		for i := 1; i <= 10; i++ {
			up := p.DeepCopy()
			up.Labels["v"] = string(rune('0' + i%10))
			if i == 10 {
				up.Labels["v"] = "last"
			}
			n.send(nodekit.UPDATE, up)
		}
		synctest.Wait()
		close(rt.gate)
		settle(3 * time.Second)
		n.status.mu.Lock()
		defer n.status.mu.Unlock()
		// The worker was busy with v0 while v1..v9 and "last" arrived: it
		// must go straight to the newest.
		for _, v := range n.status.versions {
			if v != "0" && v != "last" {
				t.Fatalf("an intermediate spec was synced: %v", n.status.versions)
			}
		}
		if last := n.status.versions[len(n.status.versions)-1]; last != "last" {
			t.Fatalf("the newest spec was never synced: %v", n.status.versions)
		}
	})
}

func TestAdmissionRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		deny := nodekit.AdmitFunc(func(_ context.Context, r nodekit.AdmitRequest) nodekit.Decision {
			if r.Pod.Labels["team"] == "" {
				return nodekit.Decision{Reason: "MissingTeam", Message: "pods need a team label"}
			}
			return nodekit.Admitted
		})
		n := startNode(t, rt, rt, deny)
		n.send(nodekit.ADD, pod("u1", v1.RestartPolicyAlways, "app"))
		ok := pod("u2", v1.RestartPolicyAlways, "app")
		ok.Labels = map[string]string{"team": "a"}
		n.send(nodekit.ADD, ok)
		settle(3 * time.Second)
		s := n.status.get(t, "u1")
		if s.Phase != v1.PodFailed || s.Reason != "MissingTeam" || !strings.Contains(s.Message, "pods need a team label") {
			t.Fatalf("rejected pod status: %+v", s)
		}
		for _, c := range rt.Calls() {
			if strings.Contains(c, "pod-u1") {
				t.Fatalf("runtime touched a rejected pod: %s", c)
			}
		}
		if n.status.get(t, "u2").Phase != v1.PodRunning {
			t.Fatal("admitted pod not running")
		}
	})
}

func TestOrphansKilledOnlyAfterSourcesReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		orphan := pod("orphan", v1.RestartPolicyAlways, "app")
		rt.SyncPod(context.Background(), nodekit.SyncPodRequest{Pod: orphan, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
		n := startNode(t, rt, rt)
		n.mu.Lock()
		n.ready = false
		n.mu.Unlock()
		settle(5 * time.Second)
		if pods, _ := rt.ListPods(context.Background(), false); len(pods) != 1 {
			t.Fatal("orphan killed before all sources were seen")
		}
		n.mu.Lock()
		n.ready = true
		n.mu.Unlock()
		settle(5 * time.Second)
		if pods, _ := rt.ListPods(context.Background(), false); len(pods) != 1 {
			t.Fatal("orphan killed before the loop handled the last source's first update")
		}
		if n.loop.ShouldPodContentBeRemoved("nobody") {
			t.Fatal("content removable before the sources' pods were handled")
		}
		n.send(nodekit.ADD) // what podconfig sends for a source's first, empty list
		settle(5 * time.Second)
		if pods, _ := rt.ListPods(context.Background(), false); len(pods) != 0 {
			t.Fatalf("orphan still running: %+v", pods[0])
		}
	})
}

func TestImageNeverPull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		rt.FailImage("missing:1", nodekit.ErrImageNeverPull)
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyAlways)
		p.Spec.Containers = []v1.Container{{Name: "app", Image: "missing:1"}}
		n.send(nodekit.ADD, p)
		settle(3 * time.Second)
		s := n.status.get(t, "u1")
		if w := containerState(t, s, "app").State.Waiting; w == nil || w.Reason != "ErrImageNeverPull" || s.Phase != v1.PodPending {
			t.Fatalf("status: %s %+v", s.Phase, w)
		}
	})
}

func TestUnhealthyRuntimePausesSyncing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		settle(2 * time.Second)
		n.mu.Lock()
		n.health = errors.New("runtime down")
		n.mu.Unlock()
		settle(time.Second) // the loop notices at its next iteration
		n.send(nodekit.ADD, pod("u1", v1.RestartPolicyAlways, "app"))
		settle(10 * time.Second)
		if err := n.loop.Healthy(); err == nil {
			t.Fatal("loop reports healthy while the runtime is down")
		}
		if len(rt.Calls()) != 0 {
			t.Fatalf("synced while unhealthy: %v", rt.Calls())
		}
		n.mu.Lock()
		n.health = nil
		n.mu.Unlock()
		settle(10 * time.Second)
		if n.status.get(t, "u1").Phase != v1.PodRunning {
			t.Fatal("pod not running after the runtime recovered")
		}
	})
}

func TestActiveDeadlineExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyAlways, "app")
		deadline := int64(30)
		p.Spec.ActiveDeadlineSeconds = &deadline
		n.send(nodekit.ADD, p)
		settle(20 * time.Second)
		if s := n.status.get(t, "u1"); s.Phase != v1.PodRunning {
			t.Fatalf("phase %s before the deadline", s.Phase)
		}
		settle(12 * time.Second)
		s := n.status.get(t, "u1")
		if s.Phase != v1.PodFailed || s.Reason != "DeadlineExceeded" {
			t.Fatalf("after the deadline: %s %q", s.Phase, s.Reason)
		}
		if pods, _ := rt.ListPods(context.Background(), false); len(pods) != 0 {
			t.Fatal("containers still running after DeadlineExceeded")
		}
	})
}

func TestStaticPodWaitsForItsPredecessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeRuntime(clock.RealClock{})
		rt := &blockingKill{FakeRuntime: fake, gate: make(chan struct{})}
		n := startNode(t, rt, fake)
		static := func(uid string) *v1.Pod {
			p := pod(uid, v1.RestartPolicyAlways, "app")
			p.Name = "web-node"
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
			return p
		}
		n.send(nodekit.ADD, static("old"))
		settle(2 * time.Second)
		// The manifest changed: the old version is removed and the new one
		// added at once. The old one's termination is held up.
		n.send(nodekit.REMOVE, static("old"))
		n.send(nodekit.ADD, static("new"))
		settle(5 * time.Second)
		if _, ok := n.status.GetPodStatus("new"); ok {
			t.Fatal("the new version started while the old one was still terminating")
		}
		close(rt.gate)
		settle(3 * time.Second)
		if s, ok := n.status.GetPodStatus("new"); !ok || s.Phase != v1.PodRunning {
			t.Fatalf("new version not running after the old one finished: %+v", s)
		}
	})
}

// blockingKill holds KillPod until its gate is closed.
type blockingKill struct {
	*agenttest.FakeRuntime
	gate chan struct{}
}

func (b *blockingKill) KillPod(ctx context.Context, req nodekit.KillPodRequest) error {
	<-b.gate
	return b.FakeRuntime.KillPod(ctx, req)
}

func TestReadinessGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/ready"}}
		n.send(nodekit.ADD, p)
		settle(3 * time.Second)
		if condition(n.status.get(t, "u1"), v1.PodReady) != v1.ConditionFalse {
			t.Fatal("Ready before the readiness gate is true")
		}
		// A controller sets the gate's condition on the API object.
		gated := p.DeepCopy()
		gated.Status.Conditions = []v1.PodCondition{{Type: "example.com/ready", Status: v1.ConditionTrue}}
		n.send(nodekit.RECONCILE, gated)
		settle(2 * time.Second)
		s := n.status.get(t, "u1")
		if condition(s, v1.PodReady) != v1.ConditionTrue || condition(s, "example.com/ready") != v1.ConditionTrue {
			t.Fatalf("conditions after the gate: %+v", s.Conditions)
		}
	})
}

func TestCompletedInitContainerIsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		n := startNode(t, rt, rt)
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
		n.send(nodekit.ADD, p)
		settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "init", 0)
		settle(3 * time.Second)
		if c := containerState(t, n.status.get(t, "u1"), "init"); !c.Ready {
			t.Fatalf("completed init container not ready: %+v", c)
		}
	})
}

// A new image is a new container: its crash-loop back-off starts afresh,
// as upstream keys the back-off by the container's hash.
func TestCrashLoopBackOffResetOnImageUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		hash := func(c *v1.Container) uint64 { return uint64(len(c.Image)) }
		n := startNodeWith(t, rt, rt, func(c *syncloop.Config) { c.ContainerHash = hash })
		p := pod("u1", v1.RestartPolicyAlways, "app")
		n.send(nodekit.ADD, p)
		settle(2 * time.Second)
		for range 3 { // exits at once, then after 10 s and 20 s back-offs
			_ = rt.ExitContainer("u1", "app", 1)
			settle(25 * time.Second)
		}
		_ = rt.ExitContainer("u1", "app", 1)
		settle(2 * time.Second)
		cs := containerState(t, n.status.get(t, "u1"), "app")
		if cs.State.Waiting == nil || !strings.Contains(cs.State.Waiting.Message, "back-off 40s") {
			t.Fatalf("want a 40s back-off before the update, have %+v", cs.State)
		}
		updated := p.DeepCopy()
		updated.Spec.Containers[0].Image = "busybox:newer"
		n.send(nodekit.UPDATE, updated)
		settle(3 * time.Second)
		cs = containerState(t, n.status.get(t, "u1"), "app")
		if cs.State.Running == nil || cs.Image != "busybox:newer" {
			t.Fatalf("the updated container did not start at once: %+v", cs)
		}
	})
}
