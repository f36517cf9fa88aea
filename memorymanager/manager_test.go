package memorymanager

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/topology"
)

const (
	mb          = uint64(1) << 20
	gb          = uint64(1) << 30
	hugepages1G = v1.ResourceName("hugepages-1Gi")
)

type fakePods struct{ pods []*v1.Pod }

var _ PodLister = (*fakePods)(nil)

func (f *fakePods) ActivePods() []*v1.Pod { return f.pods }

func (f *fakePods) remove(uid types.UID) {
	for i, p := range f.pods {
		if p.UID == uid {
			f.pods = append(f.pods[:i], f.pods[i+1:]...)
			return
		}
	}
}

// machine builds nodes NUMA nodes of memory bytes with hugePages 1Gi pages each.
func machine(t testing.TB, nodes int, memory uint64, hugePages uint64) *topology.Machine {
	t.Helper()
	m, err := topology.Synthetic(topology.Layout{Sockets: nodes, CoresPerSocket: 2, MemoryPerNUMANode: memory,
		HugePagesPerNUMANode: []topology.HugePages{{PageSizeBytes: gb, Count: hugePages}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// reservePerNode reserves memory bytes on every node.
func reservePerNode(nodes int, memory uint64) []kubeletconfig.MemoryReservation {
	var out []kubeletconfig.MemoryReservation
	for i := 0; i < nodes; i++ {
		out = append(out, kubeletconfig.MemoryReservation{NumaNode: int32(i), Limits: v1.ResourceList{
			v1.ResourceMemory: *resource.NewQuantity(int64(memory), resource.BinarySI)}})
	}
	return out
}

func newManager(t testing.TB, m *topology.Machine, reserved []kubeletconfig.MemoryReservation, dir string) (*Manager, *fakePods) {
	t.Helper()
	pods := &fakePods{}
	_, ctx := ktesting.NewTestContext(t)
	mgr, err := New(ctx, Config{Policy: PolicyStatic, Machine: m, ReservedMemory: reserved, StateDir: dir, ActivePods: pods})
	if err != nil {
		t.Fatal(err)
	}
	return mgr, pods
}

// ctr is a container with memory and 1Gi huge page requests (= limits)
// and one CPU; hp "" means no huge pages.
type ctr struct {
	name, mem, hp string
	sidecar       bool
}

func makePod(uid string, init []ctr, apps ...ctr) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	build := func(c ctr) v1.Container {
		l := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse(c.mem)}
		if c.hp != "" {
			l[hugepages1G] = resource.MustParse(c.hp)
		}
		out := v1.Container{Name: c.name, Resources: v1.ResourceRequirements{Requests: l.DeepCopy(), Limits: l}}
		if c.sidecar {
			always := v1.ContainerRestartPolicyAlways
			out.RestartPolicy = &always
		}
		return out
	}
	for _, c := range init {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, build(c))
	}
	for _, c := range apps {
		pod.Spec.Containers = append(pod.Spec.Containers, build(c))
	}
	return pod
}

func describe(blocks []Block) string {
	var s []string
	for _, b := range blocks {
		s = append(s, fmt.Sprintf("%s:%v=%dMi", b.Type, b.NUMAAffinity, b.Size/mb))
	}
	return strings.Join(s, " ")
}

// Upstream: "should succeed to allocate memory from multiple NUMA nodes".
func TestAllocateAcrossNUMANodes(t *testing.T) {
	mgr, pods := newManager(t, machine(t, 4, 2*gb, 1), reservePerNode(4, 512*mb), t.TempDir())
	// 2Gi per node less 1Gi of huge pages and 512Mi reserved: 512Mi of
	// memory per node, so 1Gi needs two nodes.
	pod := makePod("pod1", nil, ctr{name: "container1", mem: "1Gi", hp: "1Gi"})
	if d := mgr.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	if got := describe(mgr.MemoryBlocks("pod1", "container1")); got != "hugepages-1Gi:[0 1]=1024Mi memory:[0 1]=1024Mi" {
		t.Fatalf("blocks %s", got)
	}
	st := mgr.st.machine
	for _, c := range []struct {
		node       int
		name       v1.ResourceName
		free, used uint64
	}{{0, v1.ResourceMemory, 0, 512 * mb}, {1, v1.ResourceMemory, 0, 512 * mb}, {0, hugepages1G, 0, gb}, {1, hugepages1G, gb, 0}, {2, v1.ResourceMemory, 512 * mb, 0}} {
		if tb := st.table(c.node, c.name); tb.Free != c.free || tb.Reserved != c.used {
			t.Errorf("node %d %s: free %d reserved %d, want %d/%d", c.node, c.name, tb.Free, tb.Reserved, c.free, c.used)
		}
	}
	if n := st[0]; n.NumberOfAssignments != 2 || !sameGroup(n.Cells, []int{0, 1}) || st[2].NumberOfAssignments != 0 {
		t.Errorf("node 0 %+v, node 2 %+v", n, st[2])
	}
	if mems, ok := mgr.CPUSetMems("pod1", "container1"); !ok || mems != "0,1" {
		t.Errorf("cpuset.mems %q", mems)
	}
	pods.pods = []*v1.Pod{pod}
	// Node 0 is now part of a group: it cannot take a single-node
	// allocation, so the next pod lands on node 2.
	pod2 := makePod("pod2", nil, ctr{name: "c", mem: "256Mi"})
	if d := mgr.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod2, Pods: pods.pods}); !d.Admit {
		t.Fatal(d)
	}
	pods.pods = append(pods.pods, pod2)
	if mems, _ := mgr.CPUSetMems("pod2", "c"); mems != "2" {
		t.Errorf("second pod on %q, want node 2", mems)
	}
	// An affinity that would join node 1 (in group 0,1) with node 2 is refused.
	pod3 := makePod("pod3", nil, ctr{name: "c", mem: "256Mi"})
	err := mgr.Allocate(t.Context(), pod3, &pod3.Spec.Containers[0], topology.Hint{NUMANodes: 1<<1 | 1<<2, Preferred: true})
	if err == nil || err.Error() != "[memorymanager] preferred hint violates NUMA node allocation" {
		t.Errorf("mixed allocation: %v", err)
	}
}

// Upstream: "should re-use init containers memory, init containers
// requests 1Gi and 2Gi, apps containers 3Gi and 4Gi".
func TestInitContainersMemoryIsReused(t *testing.T) {
	mgr, _ := newManager(t, machine(t, 1, 16*gb, 8), reservePerNode(1, 512*mb), t.TempDir())
	pod := makePod("pod1",
		[]ctr{{name: "initContainer1", mem: "1Gi", hp: "1Gi"}, {name: "initContainer2", mem: "2Gi", hp: "2Gi"}},
		ctr{name: "container1", mem: "3Gi", hp: "3Gi"}, ctr{name: "container2", mem: "4Gi", hp: "4Gi"})
	if d := mgr.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	for name, want := range map[string]string{
		"initContainer1": "hugepages-1Gi:[0]=0Mi memory:[0]=0Mi",
		"initContainer2": "hugepages-1Gi:[0]=0Mi memory:[0]=0Mi",
		"container1":     "hugepages-1Gi:[0]=3072Mi memory:[0]=3072Mi",
		"container2":     "hugepages-1Gi:[0]=4096Mi memory:[0]=4096Mi",
	} {
		if got := describe(mgr.MemoryBlocks("pod1", name)); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	m := mgr.st.machine
	if mem, hp := m.table(0, v1.ResourceMemory), m.table(0, hugepages1G); mem.Free != 512*mb || mem.Reserved != 7*gb || hp.Free != gb || hp.Reserved != 7*gb || m[0].NumberOfAssignments != 8 {
		t.Fatalf("memory %+v, huge pages %+v, %d assignments", *mem, *hp, m[0].NumberOfAssignments)
	}
}

func TestHints(t *testing.T) {
	mgr, _ := newManager(t, machine(t, 2, 4*gb, 0), reservePerNode(2, 512*mb), t.TempDir())
	small := makePod("a", nil, ctr{name: "c", mem: "1Gi"})
	big := makePod("b", nil, ctr{name: "c", mem: "5Gi"})
	show := func(p *v1.Pod) string {
		return fmt.Sprint(mgr.TopologyHints(t.Context(), p, &p.Spec.Containers[0])["memory"])
	}
	if got := show(small); got != "[{0 preferred=true} {1 preferred=true} {0,1 preferred=false}]" {
		t.Errorf("1Gi: %s", got)
	}
	if got := show(big); got != "[{0,1 preferred=true}]" {
		t.Errorf("5Gi: %s", got)
	}
	// Once allocated, a container's hints are its blocks.
	if err := mgr.Allocate(t.Context(), small, &small.Spec.Containers[0], topology.Hint{NUMANodes: 2, Preferred: true}); err != nil {
		t.Fatal(err)
	}
	if got := show(small); got != "[{1 preferred=true}]" {
		t.Errorf("allocated: %s", got)
	}
}

func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	mach := machine(t, 2, 4*gb, 1)
	mgr, pods := newManager(t, mach, reservePerNode(2, 512*mb), dir)
	pod := makePod("p", nil, ctr{name: "c", mem: "2Gi", hp: "1Gi"})
	pods.pods = []*v1.Pod{pod}
	if d := mgr.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	before := describe(mgr.MemoryBlocks("p", "c"))

	// Restart: same blocks, same accounting.
	again, pods2 := newManager(t, mach, reservePerNode(2, 512*mb), dir)
	if got := describe(again.MemoryBlocks("p", "c")); got != before {
		t.Fatalf("after restart %s, before %s", got, before)
	}
	// The pod goes: its memory comes back.
	pods2.pods = nil
	again.Release(t.Context())
	if again.MemoryBlocks("p", "c") != nil || again.Free(0, v1.ResourceMemory) != 4*gb-512*mb-gb {
		t.Fatalf("not released: %v, free %d", again.MemoryBlocks("p", "c"), again.Free(0, v1.ResourceMemory))
	}

	_, ctx := ktesting.NewTestContext(t)
	_, err := New(ctx, Config{StateDir: dir})
	want := `could not restore state from checkpoint: [memorymanager] configured policy "None" differs from state checkpoint policy "Static", please drain this node and delete the memory manager checkpoint file "` +
		filepath.Join(dir, StateFileName) + `" before restarting Kubelet`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("policy change: %v", err)
	}
	// A machine that changed under the checkpoint is refused.
	bigger := machine(t, 2, 8*gb, 1)
	if _, err := New(ctx, Config{Policy: PolicyStatic, Machine: bigger, ReservedMemory: reservePerNode(2, 512*mb), StateDir: dir, ActivePods: &fakePods{}}); err == nil ||
		!strings.Contains(err.Error(), "the expected machine state is different from the real one") {
		t.Fatalf("changed machine: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte("{\"policyName\":"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, Config{Policy: PolicyStatic, Machine: mach, ReservedMemory: reservePerNode(2, 512*mb), StateDir: dir, ActivePods: &fakePods{}}); err == nil ||
		!strings.Contains(err.Error(), "unexpected end of JSON input") || !strings.Contains(err.Error(), "drain") {
		t.Fatalf("corrupt file: %v", err)
	}
}

func TestReservationIsChecked(t *testing.T) {
	mach := machine(t, 2, 4*gb, 0)
	_, ctx := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		reserved []kubeletconfig.MemoryReservation
		node     v1.ResourceList
		want     string
	}{
		{nil, nil, "you should specify the system reserved memory"},
		{[]kubeletconfig.MemoryReservation{{NumaNode: 7, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}}, nil,
			"references a NUMA node 7 that does not exist"},
		{reservePerNode(2, 512*mb), v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")},
			`the total amount "1Gi" of type "memory" is not equal to the value "2Gi" determined by Node Allocatable feature`},
		{reservePerNode(2, 8*gb), nil, "exceed its"},
	} {
		_, err := New(ctx, Config{Policy: PolicyStatic, Machine: mach, ReservedMemory: tc.reserved, NodeReservation: tc.node, StateDir: t.TempDir(), ActivePods: &fakePods{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	if _, err := New(ctx, Config{Policy: PolicyStatic, Machine: mach, ReservedMemory: reservePerNode(2, 512*mb),
		NodeReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourceCPU: resource.MustParse("1")},
		StateDir:        t.TempDir(), ActivePods: &fakePods{}}); err != nil {
		t.Errorf("matching reservation: %v", err)
	}
}

// TestAccountingInvariants admits and removes random Guaranteed pods on
// random machines and checks after every step that no node hands out more
// than it has, the blocks add up to what is reserved, no node mixes
// single- and cross-node allocations, and a restart accepts the
// checkpoint.
func TestAccountingInvariants(t *testing.T) {
	for seed := int64(1); seed <= 25; seed++ {
		r := rand.New(rand.NewSource(seed))
		nodes := 1 + r.Intn(4)
		mach := machine(t, nodes, uint64(2+r.Intn(4))*gb, uint64(r.Intn(2)))
		dir := t.TempDir()
		mgr, pods := newManager(t, mach, reservePerNode(nodes, 256*mb), dir)
		mgr.noSync = true
		var tm nodekit.Admitter = mgr
		if r.Intn(2) == 0 {
			var err error
			if tm, err = topology.NewManager(topology.Config{Policy: topology.PolicyBestEffort, Machine: mach}, mgr); err != nil {
				t.Fatal(err)
			}
		}
		for step := 0; step < 40; step++ {
			if r.Intn(3) > 0 || len(pods.pods) == 0 {
				var init []ctr
				if r.Intn(3) == 0 {
					init = append(init, ctr{name: "init", mem: fmt.Sprintf("%dMi", 128*(1+r.Intn(16))), sidecar: r.Intn(2) == 0})
				}
				apps := []ctr{{name: "app", mem: fmt.Sprintf("%dMi", 128*(1+r.Intn(24)))}}
				if r.Intn(3) == 0 {
					apps = append(apps, ctr{name: "app2", mem: fmt.Sprintf("%dMi", 128*(1+r.Intn(8)))})
				}
				pod := makePod(fmt.Sprintf("p%d", step), init, apps...)
				if d := tm.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod, Pods: pods.pods}); d.Admit {
					pods.pods = append(pods.pods, pod)
				}
			} else {
				pods.remove(pods.pods[r.Intn(len(pods.pods))].UID)
			}
			mgr.Release(t.Context())
			checkAccounting(t, seed, step, mgr)
		}
		if _, err := New(t.Context(), Config{Policy: PolicyStatic, Machine: mach, ReservedMemory: reservePerNode(nodes, 256*mb), StateDir: dir, ActivePods: pods}); err != nil {
			t.Fatalf("seed %d: restart refused the checkpoint: %v", seed, err)
		}
	}
}

func checkAccounting(t *testing.T, seed int64, step int, mgr *Manager) {
	t.Helper()
	mgr.mu.Lock()
	defer mgr.mu.Unlock()
	m := mgr.st.machine
	inBlocks := map[v1.ResourceName]uint64{}
	for _, containers := range mgr.st.assignments {
		for _, blocks := range containers {
			for _, b := range blocks {
				inBlocks[b.Type] += b.Size
			}
		}
	}
	reserved := map[v1.ResourceName]uint64{}
	for id, n := range m {
		for name, tb := range n.MemoryMap {
			if tb.Free+tb.Reserved != tb.Allocatable {
				t.Fatalf("seed %d step %d: node %d %s: free %d + reserved %d != allocatable %d", seed, step, id, name, tb.Free, tb.Reserved, tb.Allocatable)
			}
			reserved[name] += tb.Reserved
		}
		if n.NumberOfAssignments > 0 && len(n.Cells) > 1 {
			for _, c := range n.Cells {
				if !sameGroup(m[c].Cells, n.Cells) {
					t.Fatalf("seed %d step %d: node %d grouped %v but node %d %v", seed, step, id, n.Cells, c, m[c].Cells)
				}
			}
		}
	}
	for name, v := range reserved {
		if inBlocks[name] != v {
			t.Fatalf("seed %d step %d: %s: blocks hold %d, nodes reserve %d", seed, step, name, inBlocks[name], v)
		}
	}
}

func TestAllocatableMemory(t *testing.T) {
	mgr, _ := newManager(t, machine(t, 2, 2*gb, 1), reservePerNode(2, 512*mb), t.TempDir())
	// Per node: 1Gi of huge pages, and 2Gi less them and 512Mi reserved.
	if got := describe(mgr.AllocatableMemory()); got != "hugepages-1Gi:[0]=1024Mi memory:[0]=512Mi hugepages-1Gi:[1]=1024Mi memory:[1]=512Mi" {
		t.Fatalf("allocatable %s", got)
	}
}
