package syncloop_test

import (
	"context"
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

// gatedRuntime blocks SyncPod until released, to hold a worker busy.
type gatedRuntime struct {
	*agenttest.FakeRuntime
	gate chan struct{}
}

func (g *gatedRuntime) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	<-g.gate
	return g.FakeRuntime.SyncPod(ctx, req)
}

// TestUpdatesAreCoalesced stays on the bespoke node: its status manager
// records the pod version of each status the worker sets, the seam that
// shows which versions were synced (SimNode's real status manager
// publishes only the newest).
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
