package cpumanager

import (
	"fmt"
	"math/rand"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/topology"
)

// TestStaticAllocationInvariants drives the static policy through random
// admissions, removals and agent restarts on random machines (the 2-socket
// 64-CPU one among them) and checks after every step that no CPU is handed
// out twice, reserved CPUs never are, the shared pool and the exclusive
// sets partition the machine, every admitted container got what it asked
// for, and the checkpoint on disk says the same.
func TestStaticAllocationInvariants(t *testing.T) {
	layouts := []topology.Layout{
		{Sockets: 2, CoresPerSocket: 16, ThreadsPerCore: 2},
		{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 2},
		{Sockets: 2, NUMANodesPerSocket: 2, CoresPerSocket: 8, ThreadsPerCore: 2},
		{Sockets: 4, CoresPerSocket: 3},
		{Sockets: 1, CoresPerSocket: 2},
		{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 4},
	}
	seeds := int64(40)
	if testing.Short() {
		seeds = 8
	}
	for seed := int64(1); seed <= seeds; seed++ {
		r := rand.New(rand.NewSource(seed))
		l := layouts[int(seed)%len(layouts)]
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runInvariants(t, r, l)
		})
	}
}

type admitted struct {
	pod  *v1.Pod
	want map[string]int // container -> exclusive CPUs expected
}

func runInvariants(t *testing.T, r *rand.Rand, l topology.Layout) {
	machine, err := topology.Synthetic(l)
	if err != nil {
		t.Fatal(err)
	}
	topo := machine.CPU
	opts := map[string]string{}
	if r.Intn(3) == 0 {
		opts[OptionFullPCPUsOnly] = "true"
	}
	if r.Intn(3) == 0 {
		opts[OptionDistributeCPUsAcrossNUMA] = "true"
	}
	if r.Intn(4) == 0 {
		opts[OptionStrictCPUReservation] = "true"
	}
	cfg := Config{Policy: PolicyStatic, Topology: topo, Options: opts, StateDir: t.TempDir()}
	if r.Intn(2) == 0 {
		cfg.ReservedCPU = resource.MustParse(strconv.Itoa(1+r.Intn(max(1, topo.NumCPUs()/4))) + "500m")
	} else {
		all := topo.CPUs().List()
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		cfg.ReservedSystemCPUs = cpuset.New(all[:1+r.Intn(max(1, len(all)/4))]...)
	}
	pods := &fakePods{}
	cfg.ActivePods = pods
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.noSync = true
	reserved := m.ReservedCPUs()
	policy := []string{topology.PolicyNone, topology.PolicyBestEffort, topology.PolicyRestricted, topology.PolicySingleNUMANode}[r.Intn(4)]
	scope := []string{topology.ScopeContainer, topology.ScopePod}[r.Intn(2)]
	admitter := func() nodekit.Admitter {
		tm, err := topology.NewManager(topology.Config{Policy: policy, Scope: scope, Machine: machine}, m)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	var live []admitted
	for step := 0; step < 80; step++ {
		switch op := r.Intn(10); {
		case op < 6: // admit a new pod
			pod, want := randomPod(r, fmt.Sprintf("p%d", step))
			var a nodekit.Admitter = m // the CPU manager alone, or behind the topology manager
			if r.Intn(2) == 0 {
				a = admitter()
			}
			d := a.Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: pods.pods})
			if d.Admit {
				pods.pods = append(pods.pods, pod)
				live = append(live, admitted{pod, want})
			}
		case op < 9 && len(live) > 0: // a pod goes away
			i := r.Intn(len(live))
			pods.remove(live[i].pod.UID)
			live = append(live[:i], live[i+1:]...)
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		default: // the agent restarts and re-admits everything
			if m, err = New(ctx, cfg); err != nil {
				t.Fatalf("step %d: restart: %v", step, err)
			}
			m.noSync = true
			for _, a := range live {
				before := map[string]cpuset.CPUSet{}
				for _, c := range podContainers(a.pod) {
					before[c.Name] = m.ExclusiveCPUs(a.pod.UID, c.Name)
				}
				if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: a.pod, Pods: pods.pods}); !d.Admit {
					t.Fatalf("step %d: re-admission after restart rejected: %+v", step, d)
				}
				for name, cpus := range before {
					if got := m.ExclusiveCPUs(a.pod.UID, name); !got.Equals(cpus) {
						t.Fatalf("step %d: %s/%s moved from %s to %s on re-admission", step, a.pod.Name, name, cpus, got)
					}
				}
			}
		}
		// A rejected pod keeps what its earlier containers got until the
		// next stale pass, as upstream: it is not active, so this pass
		// releases it.
		if err := m.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, step, m, topo, reserved, live, opts)
	}
}

func checkInvariants(t *testing.T, step int, m *Manager, topo *topology.CPUTopology, reserved cpuset.CPUSet, live []admitted, opts map[string]string) {
	t.Helper()
	m.mu.Lock()
	st := m.st.clone()
	m.mu.Unlock()
	owner := map[int]string{}
	union := st.defaultSet
	for _, a := range live {
		concurrent := cpuset.New() // app containers and sidecars run together
		for _, c := range podContainers(a.pod) {
			cpus, _ := st.get(string(a.pod.UID), c.Name)
			if cpus.Size() != a.want[c.Name] {
				t.Fatalf("step %d: %s/%s holds %s, asked for %d", step, a.pod.Name, c.Name, cpus, a.want[c.Name])
			}
			if !cpus.Intersection(reserved).IsEmpty() {
				t.Fatalf("step %d: %s/%s holds reserved CPUs %s", step, a.pod.Name, c.Name, cpus.Intersection(reserved))
			}
			if !cpus.Intersection(st.defaultSet).IsEmpty() {
				t.Fatalf("step %d: %s/%s holds shared CPUs %s", step, a.pod.Name, c.Name, cpus.Intersection(st.defaultSet))
			}
			if opts[OptionFullPCPUsOnly] == "true" {
				for _, cpu := range cpus.List() {
					core, _ := topo.CoreOf(cpu)
					if !topo.CPUsInCores(core).IsSubsetOf(cpus) {
						t.Fatalf("step %d: full-pcpus-only, but %s/%s holds part of core %d: %s", step, a.pod.Name, c.Name, core, cpus)
					}
				}
			}
			for _, cpu := range cpus.List() {
				if o, ok := owner[cpu]; ok && o != a.pod.Name {
					t.Fatalf("step %d: CPU %d handed to %s and %s", step, cpu, o, a.pod.Name)
				}
				owner[cpu] = a.pod.Name
			}
			isInit := false
			for i := range a.pod.Spec.InitContainers {
				if a.pod.Spec.InitContainers[i].Name == c.Name && !podutil.IsSidecar(&a.pod.Spec.InitContainers[i]) {
					isInit = true
				}
			}
			if !isInit {
				if !concurrent.Intersection(cpus).IsEmpty() {
					t.Fatalf("step %d: containers of %s running together share %s", step, a.pod.Name, concurrent.Intersection(cpus))
				}
				concurrent = concurrent.Union(cpus)
			}
			union = union.Union(cpus)
		}
	}
	if len(st.assignments) > len(live) {
		t.Fatalf("step %d: %d pods hold CPUs, %d are live", step, len(st.assignments), len(live))
	}
	want := topo.CPUs()
	if opts[OptionStrictCPUReservation] == "true" {
		want = want.Difference(reserved)
	}
	if !union.Equals(want) {
		t.Fatalf("step %d: shared %s plus exclusive CPUs cover %s, not %s", step, st.defaultSet, union, want)
	}
	_, disk, _, err := readCheckpoint(m.path)
	if err != nil || !statesEqual(disk, st) {
		t.Fatalf("step %d: checkpoint %+v (%v) differs from memory %+v", step, disk, err, st)
	}
}

// randomPod is a pod of 1-3 app containers and maybe init containers and a
// sidecar; usually Guaranteed with integer CPUs, sometimes not. want says
// how many exclusive CPUs each container should end up with.
func randomPod(r *rand.Rand, uid string) (*v1.Pod, map[string]int) {
	cpu := func() string {
		switch r.Intn(6) {
		case 0:
			return "500m"
		case 1:
			return "1500m"
		default:
			return strconv.Itoa(1 + r.Intn(6))
		}
	}
	var init []container
	for i := 0; i < r.Intn(3); i++ {
		init = append(init, container{name: fmt.Sprintf("init%d", i), cpu: cpu(), sidecar: r.Intn(3) == 0})
	}
	var apps []container
	for i := 0; i <= r.Intn(3); i++ {
		apps = append(apps, container{name: fmt.Sprintf("app%d", i), cpu: cpu()})
	}
	if r.Intn(6) == 0 {
		apps[0].cpu = "1/2" // burstable pod: all shared
	}
	pod := makePod(uid, init, apps...)
	want := map[string]int{}
	for _, c := range podContainers(pod) {
		want[c.Name] = guaranteedCPUs(pod, c)
	}
	return pod, want
}
