package statusmgr

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

const gi = 1 << 30

// testMachine is a 4-core, 8Gi machine with 100Gi of disk and 64 2Mi huge
// pages (128Mi).
func testMachine() Machine {
	return Machine{
		NumCores: 4, MemoryBytes: 8 * gi, EphemeralStorageBytes: 100 * gi,
		HugePages: map[uint64]uint64{2 << 20: 64, 1 << 30: 0},
		MachineID: "mid", SystemUUID: "uuid", BootID: "boot-1",
		KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 13 (trixie)",
	}
}

// switchable is a condition provider tests flip.
type switchable struct {
	mu sync.Mutex
	st ConditionState
}

func (s *switchable) set(st ConditionState) { s.mu.Lock(); s.st = st; s.mu.Unlock() }
func (s *switchable) NodeCondition(context.Context) ConditionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

type nodeFixture struct {
	cs    *fake.Clientset
	clock *clocktesting.FakeClock
	r     *NodeReporter
	ready *switchable
}

func newNodeFixture(t *testing.T, cfg NodeConfig, objects ...*v1.Node) *nodeFixture {
	t.Helper()
	f := &nodeFixture{cs: fake.NewClientset(), clock: clocktesting.NewFakeClock(t0),
		ready: &switchable{st: ConditionState{Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "ok"}}}
	for _, n := range objects {
		if err := f.cs.Tracker().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.NodeName == "" {
		cfg.NodeName = "node1"
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = "10.0.0.5"
	}
	if cfg.Machine == nil {
		cfg.Machine = MachineInfoFunc(func(context.Context) (Machine, error) { return testMachine(), nil })
	}
	if cfg.Conditions == nil {
		cfg.Conditions = map[v1.NodeConditionType]ConditionProvider{v1.NodeReady: f.ready}
	}
	cfg.Clock = f.clock
	r, err := NewNodeReporter(clientgo.Wrap(f.cs), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	return f
}

func (f *nodeFixture) node(t *testing.T) *v1.Node {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(t.Context(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *nodeFixture) patches() int { return countActions(f.cs, "patch", "status") }

func nodeCondition(n *v1.Node, typ v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

func TestRegisterCreatesTheNode(t *testing.T) {
	f := newNodeFixture(t, NodeConfig{
		Labels:   map[string]string{"example.com/pool": "edge"},
		Taints:   []v1.Taint{{Key: "example.com/edge", Effect: v1.TaintEffectNoSchedule}},
		Reserved: v1.ResourceList{v1.ResourceCPU: qty("500m"), v1.ResourceMemory: qty("1Gi")},
	})
	if err := f.r.Register(t.Context()); err != nil {
		t.Fatal(err)
	}
	n := f.node(t)
	for k, v := range map[string]string{
		v1.LabelHostname: "node1", v1.LabelOSStable: runtime.GOOS, v1.LabelArchStable: runtime.GOARCH,
		labelBetaOS: runtime.GOOS, labelBetaArch: runtime.GOARCH, "example.com/pool": "edge",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "example.com/edge" {
		t.Errorf("taints = %+v", n.Spec.Taints)
	}
	for name, want := range map[v1.ResourceName]string{
		v1.ResourceCPU: "4", v1.ResourceMemory: "8Gi", v1.ResourceEphemeralStorage: "100Gi", v1.ResourcePods: "110",
		"hugepages-2Mi": "128Mi", "hugepages-1Gi": "0",
	} {
		if got := n.Status.Capacity[name]; got.Cmp(qty(want)) != 0 {
			t.Errorf("capacity %s = %s, want %s", name, got.String(), want)
		}
	}
	// Allocatable: capacity minus reserved, memory also minus huge pages.
	for name, want := range map[v1.ResourceName]string{
		v1.ResourceCPU: "3500m", v1.ResourceMemory: "7040Mi", v1.ResourcePods: "110", "hugepages-2Mi": "128Mi",
	} {
		if got := n.Status.Allocatable[name]; got.Cmp(qty(want)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, got.String(), want)
		}
	}
	wantAddrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "node1"}}
	if !jsonEqual(n.Status.Addresses, wantAddrs) {
		t.Errorf("addresses = %+v, want %+v", n.Status.Addresses, wantAddrs)
	}
	info := n.Status.NodeInfo
	if info.MachineID != "mid" || info.SystemUUID != "uuid" || info.BootID != "boot-1" || info.KernelVersion != "6.1.0" ||
		info.OSImage != "Debian GNU/Linux 13 (trixie)" || info.OperatingSystem != runtime.GOOS || info.Architecture != runtime.GOARCH ||
		info.KubeletVersion != "v1.37.2" {
		t.Errorf("nodeInfo = %+v", info)
	}
	if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 10250 {
		t.Errorf("kubelet port = %d, want 10250", p)
	}
	var types []v1.NodeConditionType
	for _, c := range n.Status.Conditions {
		types = append(types, c.Type)
	}
	want := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure, v1.NodeReady}
	if !jsonEqual(types, want) {
		t.Errorf("conditions %v, want %v (Ready last)", types, want)
	}
	if c := nodeCondition(n, v1.NodeMemoryPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure = %+v, want False KubeletHasSufficientMemory by default", c)
	}
	if c := nodeCondition(n, v1.NodeReady); c.Status != v1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready = %+v, want True since %v", c, t0)
	}
}

func TestRegisterReconcilesAnExistingNode(t *testing.T) {
	existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1", Labels: map[string]string{
		v1.LabelHostname: "old-host", "example.com/pool": "old", "team": "kept",
	}}}
	f := newNodeFixture(t, NodeConfig{Hostname: "new-host", Labels: map[string]string{"example.com/pool": "edge"}}, existing)
	if err := f.r.Register(t.Context()); err != nil {
		t.Fatalf("registering over an existing Node: %v", err)
	}
	n := f.node(t)
	for k, v := range map[string]string{v1.LabelHostname: "new-host", "example.com/pool": "edge", "team": "kept", v1.LabelOSStable: runtime.GOOS} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if n.UID != "u1" {
		t.Errorf("the Node was replaced (uid %s)", n.UID)
	}
}

func TestNodeStatusPatchedOnlyWhenChangedOrDue(t *testing.T) {
	f := newNodeFixture(t, NodeConfig{StatusReportFrequency: 5 * time.Minute})
	ctx := t.Context()
	if err := f.r.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	base := f.patches()

	// Nothing changed: heartbeats alone are not sent.
	for range 3 {
		f.clock.Step(10 * time.Second)
		if err := f.r.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.patches(); got != base {
		t.Fatalf("%d patches without a change, want none", got-base)
	}

	// A condition flips: patched at once, with a new transition time.
	f.clock.Step(10 * time.Second)
	f.ready.set(ConditionState{Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "runtime down"})
	if err := f.r.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.patches(); got != base+1 {
		t.Fatalf("%d patches after Ready flipped, want 1", got-base)
	}
	c := nodeCondition(f.node(t), v1.NodeReady)
	if c.Status != v1.ConditionFalse || c.Message != "runtime down" || !c.LastTransitionTime.Time.Equal(f.clock.Now()) {
		t.Errorf("Ready = %+v, want False since now", c)
	}
	flipped := f.clock.Now()
	if p := nodeCondition(f.node(t), v1.NodePIDPressure); !p.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("PIDPressure lastTransitionTime = %v, want %v (its status never changed)", p.LastTransitionTime, t0)
	}

	// Unchanged for the report frequency: patched anyway, heartbeat moves,
	// transition time stays.
	f.clock.Step(4*time.Minute + 59*time.Second)
	if err := f.r.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.patches(); got != base+1 {
		t.Fatalf("patched before the report frequency elapsed")
	}
	f.clock.Step(time.Second)
	if err := f.r.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.patches(); got != base+2 {
		t.Fatalf("%d patches after 5 minutes without a change, want 1", got-base-1)
	}
	c = nodeCondition(f.node(t), v1.NodeReady)
	if !c.LastHeartbeatTime.Time.Equal(f.clock.Now()) || !c.LastTransitionTime.Time.Equal(flipped) {
		t.Errorf("Ready = %+v, want heartbeat now and transition kept at %v", c, flipped)
	}
}

func TestNodeNotReadyWithoutCapacity(t *testing.T) {
	f := newNodeFixture(t, NodeConfig{}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}})
	f.r.cfg.Machine = MachineInfoFunc(func(context.Context) (Machine, error) { return Machine{}, errors.New("no /proc") })
	f.r.registered = true
	if err := f.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := nodeCondition(f.node(t), v1.NodeReady)
	if c.Status != v1.ConditionFalse || c.Message != "missing node capacity for resources: cpu, memory, pods, ephemeral-storage" {
		t.Errorf("Ready = %+v, want False naming the missing capacities", c)
	}
}

func TestNodeReregistersAfterDeletion(t *testing.T) {
	f := newNodeFixture(t, NodeConfig{})
	if err := f.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f.cs.CoreV1().Nodes().Delete(t.Context(), "node1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.r.SyncOnce(t.Context()); !apierrors.IsNotFound(err) {
		t.Fatalf("sync of a deleted Node = %v, want its NotFound", err)
	}
	if err := f.r.SyncOnce(t.Context()); err != nil {
		t.Fatalf("next sync: %v, want the Node registered again", err)
	}
	f.node(t)
}

func TestNodeAddressesAreReplaced(t *testing.T) {
	old := &v1.Node{Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: "h"},
	}}}
	cur := old.DeepCopy()
	cur.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: "h"}}
	patch, err := nodeStatusPatch(old, cur)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: old.Status})
	got, err := cs.CoreV1().Nodes().Patch(t.Context(), "n", "application/strategic-merge-patch+json", patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(got.Status.Addresses, cur.Status.Addresses) {
		t.Errorf("addresses after patch %s = %+v, want %+v", patch, got.Status.Addresses, cur.Status.Addresses)
	}
}

func TestNodeRunBacksOffUntilRegistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newNodeFixture(t, NodeConfig{})
		failures := 3
		f.cs.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
			if failures > 0 {
				failures--
				return true, nil, apierrors.NewServiceUnavailable("starting")
			}
			return false, nil, nil
		})
		creates := func() int { return countActions(f.cs, "create", "") }
		stop := startInBubble(t, f.r.Run)
		defer stop()
		step := stepper(f.clock)
		if creates() != 1 {
			t.Fatalf("%d registration attempts at start, want 1", creates())
		}
		for i, wait := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
			step(wait - time.Millisecond)
			if creates() != i+1 {
				t.Fatalf("retry %d came before its %v back-off", i+1, wait)
			}
			step(time.Millisecond)
			if creates() != i+2 {
				t.Fatalf("retry %d did not come after %v", i+1, wait)
			}
		}
		f.node(t)
		// Registered: from now on the status is synced every 10s.
		gets := countActions(f.cs, "get", "")
		step(10*time.Second - time.Millisecond)
		if countActions(f.cs, "get", "") != gets {
			t.Fatalf("status synced before the 10s update frequency")
		}
		step(time.Millisecond)
		if countActions(f.cs, "get", "") != gets+1 {
			t.Fatalf("status not synced after 10s")
		}
	})
}

// startInBubble runs run in a goroutine of the synctest bubble and waits
// until it blocks; the returned func stops it and checks it returned
// context.Canceled.
func startInBubble(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	synctest.Wait()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}
}

// stepper advances the fake clock and waits until every goroutine of the
// bubble is blocked again.
func stepper(fc *clocktesting.FakeClock) func(time.Duration) {
	return func(d time.Duration) {
		fc.Step(d)
		synctest.Wait()
	}
}

func TestNodeConfigValidation(t *testing.T) {
	tests := map[string]NodeConfig{
		"no name":     {},
		"bad name":    {NodeName: "Node_1"},
		"bad ip":      {NodeName: "n", NodeIP: "10.0.0"},
		"bad label":   {NodeName: "n", Labels: map[string]string{"a b": "c"}},
		"bad taint":   {NodeName: "n", Taints: []v1.Taint{{Key: "k", Effect: "Sometimes"}}},
		"neg reserve": {NodeName: "n", Reserved: v1.ResourceList{v1.ResourceCPU: qty("-1")}},
	}
	for name, cfg := range tests {
		if _, err := NewNodeReporter(clientgo.Wrap(fake.NewClientset()), cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// CachedUnlessFailing: the status sync reads the cache while the Lease
// renews, GETs the Node while renewals fail and for CacheDistrust after
// the last failure, and reads the cache again after that.
func TestNodeStatusCacheDistrustedAfterLeaseFailure(t *testing.T) {
	var f *nodeFixture
	var cached func() (*v1.Node, bool)
	f = newNodeFixture(t, NodeConfig{Cached: func() (*v1.Node, bool) { return cached() }})
	hb, err := NewHeartbeat(clientgo.Wrap(f.cs), HeartbeatConfig{NodeName: "node1", Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	cached = CachedUnlessFailing(func() (*v1.Node, bool) {
		obj, err := f.cs.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "node1")
		if err != nil {
			return nil, false
		}
		return obj.(*v1.Node), true
	}, hb, CacheDistrust)
	ctx := t.Context()
	nodeGets := func() int {
		n := 0
		for _, a := range f.cs.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" && a.GetSubresource() == "" {
				n++
			}
		}
		return n
	}
	down := false
	f.cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if down {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	// sync steps the clock, renews the Lease and syncs the status; it
	// returns the Node GETs the sync made.
	sync := func(step time.Duration) int {
		t.Helper()
		f.clock.Step(step)
		renewErr := hb.Renew(ctx)
		if (renewErr != nil) != down {
			t.Fatalf("renewal with the API server down=%v: %v", down, renewErr)
		}
		before := nodeGets()
		if err := f.r.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return nodeGets() - before
	}
	if err := f.r.SyncOnce(ctx); err != nil { // registers
		t.Fatal(err)
	}
	n := f.node(t)
	n.UID = "node-uid" // the Lease's owner; the fake API server sets none
	if err := f.cs.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
	if got := sync(10 * time.Second); got != 0 {
		t.Fatalf("%d Node GETs with the Lease renewing, want the cache", got)
	}
	down = true
	if got := sync(10 * time.Second); got != 1 {
		t.Fatalf("%d Node GETs after a failed renewal, want 1", got)
	}
	down = false
	if got := sync(CacheDistrust - time.Second); got != 1 {
		t.Fatalf("%d Node GETs %v after the failure, want 1", got, CacheDistrust-time.Second)
	}
	if got := sync(2 * time.Second); got != 0 {
		t.Fatalf("%d Node GETs %v after the failure, want the cache again", got, CacheDistrust+time.Second)
	}
}

// With a cache, steady state reads no Node from the API server: the status
// is computed from the cached Node and patched only when it changes; a
// failed patch makes the next sync read the API server.
func TestNodeStatusFromCache(t *testing.T) {
	var f *nodeFixture
	cached := func() (*v1.Node, bool) { // the tracker stands in for an informer
		obj, err := f.cs.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "node1")
		if err != nil {
			return nil, false
		}
		return obj.(*v1.Node), true
	}
	f = newNodeFixture(t, NodeConfig{Cached: cached})
	ctx := t.Context()
	if err := f.r.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	gets := func() int { return countActions(f.cs, "get", "") }
	before := gets()
	for range 3 {
		f.clock.Step(10 * time.Second)
		if err := f.r.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := gets() - before; got != 0 {
		t.Fatalf("%d GETs of the Node for 3 syncs with a cache, want none", got)
	}
	f.ready.set(ConditionState{Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "runtime down"})
	f.clock.Step(10 * time.Second)
	if err := f.r.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if c := nodeCondition(f.node(t), v1.NodeReady); c.Status != v1.ConditionFalse {
		t.Fatalf("Ready = %+v after a change computed from the cache", c)
	}
}
