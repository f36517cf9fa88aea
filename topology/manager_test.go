package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

// fakeProvider answers hints from maps keyed by container name ("" for the
// pod) and records what it was asked to allocate.
type fakeProvider struct {
	hints     map[string]map[string][]Hint
	fail      error
	allocated []string
}

var _ HintProvider = (*fakeProvider)(nil)

func (f *fakeProvider) TopologyHints(_ context.Context, _ *v1.Pod, c *v1.Container) map[string][]Hint {
	return f.hints[c.Name]
}

func (f *fakeProvider) PodTopologyHints(context.Context, *v1.Pod) map[string][]Hint {
	return f.hints[""]
}

func (f *fakeProvider) Allocate(_ context.Context, _ *v1.Pod, c *v1.Container, h Hint) error {
	if f.fail != nil {
		return f.fail
	}
	f.allocated = append(f.allocated, fmt.Sprintf("%s@%s", c.Name, h.NUMANodes))
	return nil
}

func twoContainerPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "init"}},
			Containers:     []v1.Container{{Name: "app"}},
		},
	}
}

func TestAdmitContainerScope(t *testing.T) {
	cpu := &fakeProvider{hints: map[string]map[string][]Hint{
		"app": {"cpu": {pref(1), notPref(0, 1)}},
	}}
	mem := &fakeProvider{hints: map[string]map[string][]Hint{
		"app": {"memory": {pref(0), pref(1), notPref(0, 1)}},
	}}
	m, err := NewManager(Config{Policy: PolicySingleNUMANode, Machine: fourNodes()}, cpu, mem)
	if err != nil {
		t.Fatal(err)
	}
	d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: twoContainerPod()})
	if !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	want := "init@any app@1"
	if got := strings.Join(cpu.allocated, " "); got != want {
		t.Errorf("cpu allocations %q, want %q", got, want)
	}
	if got := strings.Join(mem.allocated, " "); got != want {
		t.Errorf("memory allocations %q, want %q", got, want)
	}
}

func TestAdmitRejectsMisalignment(t *testing.T) {
	cpu := &fakeProvider{hints: map[string]map[string][]Hint{"app": {"cpu": {pref(0)}}}}
	mem := &fakeProvider{hints: map[string]map[string][]Hint{"app": {"memory": {pref(1)}}}}
	for _, tc := range []struct {
		policy string
		admit  bool
	}{{PolicyNone, true}, {PolicyBestEffort, true}, {PolicyRestricted, false}, {PolicySingleNUMANode, false}} {
		cpu.allocated, mem.allocated = nil, nil
		m, err := NewManager(Config{Policy: tc.policy, Machine: fourNodes()}, cpu, mem)
		if err != nil {
			t.Fatal(err)
		}
		d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: twoContainerPod()})
		if d.Admit != tc.admit {
			t.Errorf("%s: decision %+v", tc.policy, d)
		}
		if !d.Admit && (d.Reason != "TopologyAffinityError" || d.Message != "Resources cannot be allocated with Topology locality") {
			t.Errorf("%s: decision %+v is not upstream's", tc.policy, d)
		}
		if !d.Admit && strings.Contains(strings.Join(cpu.allocated, " "), "app") {
			t.Errorf("%s: rejected container allocated: %v", tc.policy, cpu.allocated)
		}
	}
}

func TestAdmitPodScope(t *testing.T) {
	cpu := &fakeProvider{hints: map[string]map[string][]Hint{"": {"cpu": {pref(2), pref(3)}}}}
	m, err := NewManager(Config{Policy: PolicyRestricted, Scope: ScopePod, Machine: fourNodes()}, cpu)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: twoContainerPod()}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	if got := strings.Join(cpu.allocated, " "); got != "init@2 app@2" {
		t.Fatalf("allocations %q: every container gets the pod's affinity", got)
	}
}

type smtError struct{}

func (smtError) Error() string {
	return "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
}
func (smtError) Reason() string { return "SMTAlignmentError" }

func TestAdmitAllocationErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want nodekit.Decision
	}{
		{fmt.Errorf("wrapped: %w", smtError{}), nodekit.Decision{Reason: "SMTAlignmentError", Message: "wrapped: SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"}},
		{errors.New("not enough cpus available to satisfy request: requested=4, available=3"), nodekit.Decision{
			Reason: "UnexpectedAdmissionError", Message: "Allocate failed due to not enough cpus available to satisfy request: requested=4, available=3, which is unexpected"}},
	} {
		m, err := NewManager(Config{}, &fakeProvider{fail: tc.err})
		if err != nil {
			t.Fatal(err)
		}
		if d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: twoContainerPod()}); d != tc.want {
			t.Errorf("decision %+v, want %+v", d, tc.want)
		}
	}
}

func TestNewManagerChecksConfig(t *testing.T) {
	nine := &Machine{}
	for i := 0; i < 9; i++ {
		nine.NUMANodes = append(nine.NUMANodes, NUMANode{ID: i})
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Policy: "strict"}, `unknown policy: "strict"`},
		{Config{Scope: "node"}, `unknown scope: "node"`},
		{Config{Policy: PolicyRestricted}, "needs Config.Machine"},
		{Config{Policy: PolicyRestricted, Machine: nine}, "more than 8 NUMA Nodes"},
		{Config{Policy: PolicyRestricted, Machine: fourNodes(), Options: map[string]string{OptionMaxAllowableNUMANodes: "4"}}, "should not be less than 8"},
		{Config{Policy: PolicyRestricted, Machine: fourNodes(), Options: map[string]string{"fast": "true"}}, `unknown Topology Manager Policy option: "fast"`},
	} {
		_, err := NewManager(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := NewManager(Config{Policy: PolicyRestricted, Machine: nine, Options: map[string]string{OptionMaxAllowableNUMANodes: "9"}}); err != nil {
		t.Errorf("max-allowable-numa-nodes 9: %v", err)
	}
}
