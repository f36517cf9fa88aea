package admission_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

var _ nodekit.Admitter = (*admission.Chain)(nil)

// recorder admits or rejects and records that it was asked.
func recorder(name string, admit bool, log *[]string) nodekit.Admitter {
	return nodekit.AdmitFunc(func(context.Context, nodekit.AdmitRequest) nodekit.Decision {
		*log = append(*log, name)
		if admit {
			return nodekit.Admitted
		}
		return nodekit.Decision{Reason: "By" + name, Message: name + " said no"}
	})
}

func TestChain(t *testing.T) {
	cases := []struct {
		name      string
		admitters []bool // true admits
		want      nodekit.Decision
		wantAsked []string
	}{
		{name: "empty chain admits", want: nodekit.Admitted},
		{name: "all admit", admitters: []bool{true, true, true}, want: nodekit.Admitted, wantAsked: []string{"a0", "a1", "a2"}},
		{name: "first rejection wins", admitters: []bool{true, false, false}, want: reject("Bya1", "a1 said no"), wantAsked: []string{"a0", "a1"}},
		{name: "rejection at the end", admitters: []bool{true, true, false}, want: reject("Bya2", "a2 said no"), wantAsked: []string{"a0", "a1", "a2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			var as []nodekit.Admitter
			for i, admit := range tc.admitters {
				as = append(as, recorder(fmt.Sprintf("a%d", i), admit, &asked))
			}
			got := admission.NewChain(as...).Admit(context.Background(), nodekit.AdmitRequest{Pod: pod("p", "")})
			if got != tc.want || !reflect.DeepEqual(asked, tc.wantAsked) {
				t.Errorf("got %+v asking %v, want %+v asking %v", got, asked, tc.want, tc.wantAsked)
			}
		})
	}
}

func TestChainAddNilAndNesting(t *testing.T) {
	var asked []string
	inner := admission.NewChain(recorder("inner", true, &asked), nil)
	c := admission.NewChain(nil, inner)
	c.Add(nil)
	c.Add(recorder("outer", false, &asked))
	var zero admission.Chain
	ctx := context.Background()
	if d := zero.Admit(ctx, nodekit.AdmitRequest{}); d != nodekit.Admitted {
		t.Errorf("zero chain: got %+v", d)
	}
	d := c.Admit(ctx, nodekit.AdmitRequest{Pod: pod("p", "")})
	if d.Reason != "Byouter" || !reflect.DeepEqual(asked, []string{"inner", "outer"}) {
		t.Errorf("got %+v asking %v", d, asked)
	}
}

func TestBuiltinsOrder(t *testing.T) {
	var names []string
	for _, a := range admission.Builtins(nil) {
		names = append(names, reflect.TypeOf(a).Elem().Name())
	}
	want := []string{"OS", "SupplementalGroupsPolicy", "ResourceFit", "NodeAffinity", "NodeName", "NodePorts", "TaintToleration", "PodFeatures"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("Builtins = %v, want %v", names, want)
	}
}

// TestDefaultChainOrder checks that DefaultChain places every handler in
// upstream's slot, leaves nil ones out, and falls back to Builtins(Node).
func TestDefaultChainOrder(t *testing.T) {
	var asked []string
	r := func(name string) nodekit.Admitter { return recorder(name, true, &asked) }
	all := admission.DefaultChain(admission.ChainConfig{
		Builtins: []nodekit.Admitter{r("builtin1"), r("builtin2")},
		Eviction: r("eviction"), Sysctls: r("sysctls"), Resources: r("resources"), Devices: r("devices"),
		AppArmor: r("apparmor"), DeclaredFeatures: r("declared"), Shutdown: r("shutdown"),
		Custom: []nodekit.Admitter{r("custom1"), nil, r("custom2")},
	})
	if d := admission.NewChain(all...).Admit(context.Background(), nodekit.AdmitRequest{Pod: pod("p", "")}); d != nodekit.Admitted {
		t.Fatalf("all admitting: got %+v", d)
	}
	want := []string{"eviction", "sysctls", "resources", "devices", "builtin1", "builtin2", "apparmor", "declared", "shutdown", "custom1", "custom2"}
	if !reflect.DeepEqual(asked, want) || len(all) != len(want) {
		t.Errorf("asked %v (%d admitters), want %v", asked, len(all), want)
	}

	var names []string
	for _, a := range admission.DefaultChain(admission.ChainConfig{Sysctls: r("sysctls")}) {
		if _, ok := a.(nodekit.AdmitFunc); ok {
			names = append(names, "func")
			continue
		}
		names = append(names, reflect.TypeOf(a).Elem().Name())
	}
	want = []string{"func", "OS", "SupplementalGroupsPolicy", "ResourceFit", "NodeAffinity", "NodeName", "NodePorts", "TaintToleration", "PodFeatures"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("DefaultChain with only Sysctls = %v, want %v", names, want)
	}
}

// TestBuiltinsPrecedence checks that a pod failing two checks is rejected
// with the reason upstream reports first.
func TestBuiltinsPrecedence(t *testing.T) {
	node := admissiontest.Node{
		Name:        "n1",
		Allocatable: res("cpu=1"),
		Labels:      map[string]string{"zone": "a"},
		Taints:      []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute}},
		Pods:        []*v1.Pod{pod("web", "", withPort("", "", 80))},
	}
	tooBig := func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = res("cpu=2") }
	wrongZone := withNodeSelector("zone", "b")
	wrongNode := func(p *v1.Pod) { p.Spec.NodeName = "n2" }
	port80 := withPort("", "", 80)
	wrongOS := withOS(otherOS())
	var asked []string
	runDecisionCases(t, []decisionCase{
		{name: "OS before resources", node: node, pod: pod("p", "", wrongOS, tooBig), want: reject("PodOSNotSupported", msgOSField)},
		{name: "resources before affinity", node: node, pod: pod("p", "", tooBig, wrongZone), want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000")},
		{name: "affinity before node name", node: node, pod: pod("p", "", wrongZone, wrongNode), want: reject("NodeAffinity", msgAffinity)},
		{name: "node name before ports", node: node, pod: pod("p", "", wrongNode, port80), want: reject("NodeName", msgNodeName)},
		{name: "ports before taints", node: node, pod: pod("p", "", port80), want: reject("NodePorts", msgPorts)},
		{name: "taints before pod features", node: node, pod: pod("p", "", withClaims("gpu")), want: reject("TaintToleration", msgTaint)},
		{
			name:   "custom admitters run after built-ins",
			node:   node,
			pod:    pod("p", "", withTolerations(v1.Toleration{Operator: v1.TolerationOpExists})),
			custom: []nodekit.Admitter{recorder("policy", false, &asked)},
			want:   reject("Bypolicy", "policy said no"),
		},
		{
			name:   "custom admitters not asked after a built-in rejects",
			node:   node,
			pod:    pod("p", "", tooBig),
			custom: []nodekit.Admitter{recorder("unreached", false, &asked)},
			want:   reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"),
		},
	})
	if !reflect.DeepEqual(asked, []string{"policy"}) {
		t.Errorf("custom admitters asked: %v", asked)
	}
}

func TestNilPodIsRejectedNotPanicking(t *testing.T) {
	node := admissiontest.Node{Allocatable: res("cpu=1")}
	for _, a := range admission.Builtins(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node.Object(), nil })) {
		d := a.Admit(context.Background(), nodekit.AdmitRequest{})
		if d.Admit || d.Reason != "UnexpectedAdmissionError" {
			t.Errorf("%T: got %+v", a, d)
		}
	}
}
