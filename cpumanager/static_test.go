package cpumanager

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/topology"
)

// fakePods is a PodLister over a slice.
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

// container is a container of a test pod: its name and CPU request = limit
// ("" for none); init containers may be sidecars.
type container struct {
	name, cpu string
	sidecar   bool
}

// makePod returns a pod whose containers have their CPU request as limit
// and 1G of memory, so it is Guaranteed unless a cpu is "" or differs.
func makePod(uid string, init []container, apps ...container) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	build := func(c container) v1.Container {
		res := v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1G")},
			Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("1G")},
		}
		if req, lim, ok := strings.Cut(c.cpu, "/"); ok {
			res.Requests[v1.ResourceCPU], res.Limits[v1.ResourceCPU] = resource.MustParse(req), resource.MustParse(lim)
		} else if c.cpu != "" {
			res.Requests[v1.ResourceCPU], res.Limits[v1.ResourceCPU] = resource.MustParse(c.cpu), resource.MustParse(c.cpu)
		}
		out := v1.Container{Name: c.name, Resources: res}
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

// newStaticManager returns a static-policy manager on a fresh state dir.
func newStaticManager(t testing.TB, topo *topology.CPUTopology, mod func(*Config)) (*Manager, *fakePods) {
	t.Helper()
	pods := &fakePods{}
	cfg := Config{Policy: PolicyStatic, Topology: topo, ReservedCPU: resource.MustParse("1"), StateDir: t.TempDir(), ActivePods: pods}
	if mod != nil {
		mod(&cfg)
	}
	_, ctx := ktesting.NewTestContext(t)
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, pods
}

type staticCase struct {
	name     string
	topo     func(testing.TB) *topology.CPUTopology
	reserved string // ReservedCPU quantity, default "1"
	list     string // ReservedSystemCPUs
	options  map[string]string
	// assigned and shared preload the state (pod "fakePod").
	assigned map[string]string
	shared   string
	cpu      string // the new container's CPU request/limit
	hint     topology.Hint
	// unreserved drops the reservation after start, as upstream's policy
	// tests that reserve nothing.
	unreserved bool
	want       string // its exclusive CPUs, or the admission error text
	wantErr    bool
}

// Upstream's static policy expectations (policy_static_test.go), run
// against the Manager with the same machine, reservation and state.
func TestStaticPolicyAddMatchesUpstream(t *testing.T) {
	smt := map[string]string{OptionFullPCPUsOnly: "true"}
	cases := []staticCase{
		{name: "2 CPUs, single socket HT: one core", topo: singleSocketHT, assigned: map[string]string{"c100": "2-3,6-7"}, shared: "0-1,4-5", cpu: "2", want: "1,5"},
		{name: "6 CPUs, dual socket HT: one socket", topo: dualSocketHT, assigned: map[string]string{"c100": "2"}, shared: "0-1,3-11", cpu: "6", want: "1,3,5,7,9,11"},
		{name: "6 CPUs, dual socket HT: three cores", topo: dualSocketHT, assigned: map[string]string{"c100": "1,5"}, shared: "0,2-4,6-11", cpu: "6", want: "2-4,8-10"},
		{name: "4 CPUs, dual socket no HT: one socket", topo: dualSocketNoHT, shared: "0-1,3-7", cpu: "4", want: "4-7"},
		{name: "4 CPUs, dual socket no HT: four cores", topo: dualSocketNoHT, assigned: map[string]string{"c100": "4-5"}, shared: "0-1,3,6-7", cpu: "4", want: "1,3,6-7"},
		{name: "8 CPUs, dual socket HT: a socket and a core", topo: dualSocketHT, assigned: map[string]string{"c100": "2"}, shared: "0-1,3-11", cpu: "8", want: "1,3-5,7,9-11"},
		{name: "burstable: shared pool", topo: singleSocketHT, shared: "0-7", cpu: "1/2", want: ""},
		{name: "non-integer CPU: shared pool", topo: singleSocketHT, shared: "0-7", cpu: "977m", want: ""},
		{name: "1 CPU: sibling of the reserved CPU", topo: singleSocketHT, shared: "0-7", cpu: "1", want: "4"},
		{name: "8 CPUs with 1 reserved", topo: singleSocketHT, shared: "0-7", cpu: "8", wantErr: true,
			want: "not enough cpus available to satisfy request: requested=8, available=7"},
		{name: "10 CPUs, 8 free", topo: dualSocketHT, assigned: map[string]string{"c100": "1-3"}, shared: "0,4-11", cpu: "10", wantErr: true,
			want: "not enough cpus available to satisfy request: requested=10, available=8"},
		{name: "2 CPUs, 1 free", topo: singleSocketHT, assigned: map[string]string{"c100": "1-6"}, shared: "0,7", cpu: "2", wantErr: true,
			want: "not enough cpus available to satisfy request: requested=2, available=1"},
		{name: "already allocated: same CPUs", topo: singleSocketHT, assigned: map[string]string{"new": "2-3,6-7"}, shared: "0-1,4-5", cpu: "4", want: "2-3,6-7"},
		{name: "NUMA affinity 0,2 on the 6230", topo: dualSocketMultiNUMAHT, shared: "0,2,11,21-22", cpu: "2",
			hint: topology.Hint{NUMANodes: 1<<0 | 1<<2, Preferred: true}, want: "2,21"},
		// Upstream's topology-aware allocation cases reserve nothing.
		{name: "2 CPUs, no NUMA affinity", unreserved: true, topo: dualSocketHT, shared: "0-11", cpu: "2", want: "0,6"},
		{name: "2 CPUs, NUMA 0 of dual socket HT", unreserved: true, topo: dualSocketHT, shared: "0-11", cpu: "2", hint: topology.Hint{NUMANodes: 1}, want: "0,6"},
		{name: "2 CPUs, NUMA 1 of dual socket HT", unreserved: true, topo: dualSocketHT, shared: "0-11", cpu: "2", hint: topology.Hint{NUMANodes: 2}, want: "1,7"},
		{name: "8 CPUs, NUMA 0 first", unreserved: true, topo: dualSocketHT, shared: "0-11", cpu: "8", hint: topology.Hint{NUMANodes: 1}, want: "0-2,4,6-8,10"},
		{name: "8 CPUs, NUMA 1 first", unreserved: true, topo: dualSocketHT, shared: "0-11", cpu: "8", hint: topology.Hint{NUMANodes: 2}, want: "0-1,3,5-7,9,11"},
		// Explicit reservedSystemCPUs.
		{name: "reserved 0: 8 CPUs", topo: singleSocketHT, list: "0", reserved: "0", shared: "0-7", cpu: "8", wantErr: true,
			want: "not enough cpus available to satisfy request: requested=8, available=7"},
		{name: "reserved 0,1: 1 CPU", topo: singleSocketHT, list: "0-1", reserved: "0", shared: "0-7", cpu: "1", want: "4"},
		{name: "reserved 0,1: 2 CPUs", topo: singleSocketHT, list: "0-1", reserved: "0", assigned: map[string]string{"c100": "2-3,6-7"}, shared: "0-1,4-5", cpu: "2", want: "4-5"},
		// full-pcpus-only.
		{name: "full-pcpus-only: 1 CPU", topo: singleSocketHT, options: smt, shared: "0-7", cpu: "1", wantErr: true,
			want: "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"},
		{name: "full-pcpus-only: reserved 1,6 block their cores", topo: dualSocketHT, options: smt, list: "1,6", reserved: "0", shared: "0,2-5,7-11", cpu: "10", wantErr: true,
			want: "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 8, requested CPUs = 10, CPUs per core = 2"},
		{name: "full-pcpus-only: 2 reserved, 10 CPUs", topo: dualSocketHT, options: smt, reserved: "2", shared: "1-5,7-11", cpu: "10", want: "1-5,7-11"},
		{name: "full-pcpus-only: reserved 0,6, 10 CPUs", topo: dualSocketHT, options: smt, list: "0,6", reserved: "0", shared: "1-5,7-11", cpu: "10", want: "1-5,7-11"},
		{name: "full-pcpus-only: kept after restart", topo: dualSocketHT, options: smt, list: "0-1,6-7", reserved: "0", assigned: map[string]string{"new": "2-4,8-10"}, shared: "0-1,5-7,11", cpu: "6", want: "2-4,8-10"},
		{name: "full-pcpus-only: 10 of 8 physical", topo: dualSocketHT, options: smt, list: "0-1,6-7", reserved: "0", shared: "0-11", cpu: "10", wantErr: true,
			want: "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 8, requested CPUs = 10, CPUs per core = 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo := tc.topo(t)
			m, _ := newStaticManager(t, topo, func(c *Config) {
				c.Options = tc.options
				c.SourcesReady = func() bool { return false } // keep the preloaded state
				if tc.reserved != "" {
					c.ReservedCPU = resource.MustParse(tc.reserved)
				}
				if tc.list != "" {
					c.ReservedSystemCPUs = set(t, tc.list)
				}
			})
			if tc.unreserved {
				m.static.reserved, m.static.reservedCores = cpuset.New(), cpuset.New()
			}
			m.st = newState()
			m.st.defaultSet = set(t, tc.shared)
			for name, cpus := range tc.assigned {
				pod := "fakePod"
				if name == "new" {
					pod, name = "new", "app"
				}
				m.st.set(pod, name, set(t, cpus))
			}
			pod := makePod("new", nil, container{name: "app", cpu: tc.cpu})
			err := m.Allocate(t.Context(), pod, &pod.Spec.Containers[0], tc.hint)
			if tc.wantErr {
				if err == nil || err.Error() != tc.want {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				if got := m.ExclusiveCPUs("new", "app"); !got.IsEmpty() {
					t.Fatalf("rejected container holds %s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := m.ExclusiveCPUs("new", "app").String(); got != tc.want {
				t.Fatalf("exclusive CPUs %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInitContainerCPUsAreReused(t *testing.T) {
	m, pods := newStaticManager(t, singleSocketHT(t), func(c *Config) { c.ReservedSystemCPUs = cpuset.New(0) })
	// Upstream reuses with no reservation; here CPU 0 is reserved, so the
	// init container gets 1,2,5,6 and the app container two of them.
	pod := makePod("p", []container{{name: "init", cpu: "4"}}, container{name: "app", cpu: "2"})
	pods.pods = []*v1.Pod{pod}
	if d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatal(d)
	}
	initCPUs, appCPUs := m.ExclusiveCPUs("p", "init"), m.ExclusiveCPUs("p", "app")
	if initCPUs.String() != "1-2,5-6" || appCPUs.Size() != 2 || !appCPUs.IsSubsetOf(initCPUs) {
		t.Fatalf("init %s app %s: the app container should reuse the init container's CPUs", initCPUs, appCPUs)
	}
	if got := m.SharedCPUs().String(); got != "0,3-4,7" {
		t.Fatalf("shared pool %s", got)
	}
	// A sidecar's CPUs are not reusable: it runs alongside the app.
	pod2 := makePod("q", []container{{name: "sidecar", cpu: "2", sidecar: true}}, container{name: "app", cpu: "2"})
	m2, pods2 := newStaticManager(t, singleSocketHT(t), func(c *Config) { c.ReservedSystemCPUs = cpuset.New(0) })
	pods2.pods = []*v1.Pod{pod2}
	if d := m2.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod2}); !d.Admit {
		t.Fatal(d)
	}
	if s, a := m2.ExclusiveCPUs("q", "sidecar"), m2.ExclusiveCPUs("q", "app"); !s.Intersection(a).IsEmpty() {
		t.Fatalf("sidecar %s and app %s share CPUs", s, a)
	}
}

func TestRemovedPodsReleaseCPUs(t *testing.T) {
	m, pods := newStaticManager(t, singleSocketHT(t), nil)
	a := makePod("a", nil, container{name: "app", cpu: "2"}, container{name: "side", cpu: "1"})
	b := makePod("b", nil, container{name: "app", cpu: "2"})
	for _, p := range []*v1.Pod{a, b} {
		if d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: p, Pods: pods.pods}); !d.Admit {
			t.Fatal(d)
		}
		pods.pods = append(pods.pods, p)
	}
	if got := m.SharedCPUs().Size(); got != 3 {
		t.Fatalf("shared pool %s after 5 exclusive CPUs", m.SharedCPUs())
	}
	pods.remove("a")
	if err := m.Reconcile(t.Context()); err != nil { // no runtime: only the stale-state pass
		t.Fatal(err)
	}
	if got := m.SharedCPUs().Size(); got != 6 || !m.ExclusiveCPUs("a", "app").IsEmpty() {
		t.Fatalf("shared pool %s after pod a left", m.SharedCPUs())
	}
}

func TestAdmitDecisions(t *testing.T) {
	m, _ := newStaticManager(t, singleSocketHT(t), func(c *Config) { c.Options = map[string]string{OptionFullPCPUsOnly: "true"} })
	for _, tc := range []struct {
		cpu  string
		want nodekit.Decision
	}{
		{"3", nodekit.Decision{Reason: "SMTAlignmentError", Message: "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"}},
		{"8", nodekit.Decision{Reason: "SMTAlignmentError", Message: "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 6, requested CPUs = 8, CPUs per core = 2"}},
		{"6", nodekit.Admitted},
	} {
		pod := makePod("p"+tc.cpu, nil, container{name: "app", cpu: tc.cpu})
		if d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod}); d != tc.want {
			t.Errorf("cpu %s: %+v, want %+v", tc.cpu, d, tc.want)
		}
	}
	m2, _ := newStaticManager(t, singleSocketHT(t), nil)
	d := m2.Admit(t.Context(), nodekit.AdmitRequest{Pod: makePod("big", nil, container{name: "app", cpu: "8"})})
	want := nodekit.Decision{Reason: "UnexpectedAdmissionError",
		Message: "Allocate failed due to not enough cpus available to satisfy request: requested=8, available=7, which is unexpected"}
	if d != want {
		t.Errorf("decision %+v, want %+v", d, want)
	}
}

func TestTopologyHints(t *testing.T) {
	m, _ := newStaticManager(t, dualSocketHT(t), nil)
	pod := makePod("p", nil, container{name: "app", cpu: "2"}, container{name: "big", cpu: "8"})
	burstable := makePod("b", nil, container{name: "app", cpu: "1/2"})
	show := func(h map[string][]topology.Hint) string { return fmt.Sprint(h["cpu"]) }
	// CPU 0 is reserved: either node still has 5 free CPUs.
	if got := show(m.TopologyHints(t.Context(), pod, &pod.Spec.Containers[0])); got != "[{0 preferred=true} {1 preferred=true} {0,1 preferred=false}]" {
		t.Errorf("2 CPUs: %s", got)
	}
	if got := show(m.TopologyHints(t.Context(), pod, &pod.Spec.Containers[1])); got != "[{0,1 preferred=true}]" {
		t.Errorf("8 CPUs: %s", got)
	}
	if got := m.TopologyHints(t.Context(), burstable, &burstable.Spec.Containers[0]); got != nil {
		t.Errorf("burstable pod: %v, want no preference", got)
	}
	if got := show(m.PodTopologyHints(t.Context(), pod)); got != "[{0,1 preferred=true}]" {
		t.Errorf("pod: %s", got)
	}
}

func TestNewChecksConfig(t *testing.T) {
	topo := singleSocketHT(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Policy: "dynamic"}, `unknown policy: "dynamic"`},
		{Config{Policy: PolicyStatic, Topology: topo}, "needs Config.ActivePods"},
		{Config{Policy: PolicyStatic, Topology: topo, ActivePods: &fakePods{}}, "requires systemreserved.cpu + kubereserved.cpu to be greater than zero"},
		{Config{Policy: PolicyStatic, Topology: topo, ActivePods: &fakePods{}, ReservedSystemCPUs: cpuset.New(9)}, "not all on this machine"},
		{Config{Policy: PolicyStatic, Topology: topo, ActivePods: &fakePods{}, ReservedCPU: resource.MustParse("1"), ReservedSystemCPUs: cpuset.New(0, 1)},
			"unable to reserve the required amount of CPUs (size of 0-1 did not equal 1)"},
		{Config{Policy: PolicyStatic, Topology: topo, ActivePods: &fakePods{}, ReservedCPU: resource.MustParse("1"), Options: map[string]string{"align-by-socket": "true"}},
			`option "align-by-socket" is not supported`},
		{Config{Policy: PolicyStatic, Topology: topo, ActivePods: &fakePods{}, ReservedCPU: resource.MustParse("1"), Options: map[string]string{OptionFullPCPUsOnly: "yes"}},
			`bad value for option "full-pcpus-only"`},
		{Config{Policy: PolicyNone, Options: map[string]string{OptionFullPCPUsOnly: "true"}}, "None policy: received unsupported options"},
	} {
		tc.cfg.StateDir = t.TempDir()
		if _, err := New(t.Context(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.want, err, tc.want)
		}
	}
	// 1.5 CPUs of system+kube reservation round up to 2, taken from the
	// first core: 0 and its sibling 4.
	m, _ := newStaticManager(t, topo, func(c *Config) { c.ReservedCPU = resource.MustParse("1500m") })
	if got := m.ReservedCPUs().String(); got != "0,4" {
		t.Errorf("reserved %s, want 0,4", got)
	}
}
