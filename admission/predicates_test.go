package admission_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

const (
	msgAffinity = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
	msgNodeName = "Predicate NodeName failed: node(s) didn't match the requested node name"
	msgTaint    = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
	msgPorts    = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	msgOSLabel  = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	msgOSField  = "Failed to admit pod as the OS field doesn't match node OS"
)

func otherOS() string {
	if runtime.GOOS == "windows" {
		return "linux"
	}
	return "windows"
}

func withOS(os string) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: v1.OSName(os)} }
}

func withNodeSelector(kv ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func withRequiredAffinity(reqs ...v1.NodeSelectorRequirement) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: reqs}},
			},
		}}
	}
}

func withTolerations(ts ...v1.Toleration) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Tolerations = ts }
}

func TestOS(t *testing.T) {
	runDecisionCases(t, []decisionCase{
		{name: "no OS constraints", pod: pod("p", ""), want: nodekit.Admitted},
		{name: "os label matches", pod: pod("p", "", withLabels(v1.LabelOSStable, runtime.GOOS)), want: nodekit.Admitted},
		{
			name: "os label names another OS",
			pod:  pod("p", "", withLabels(v1.LabelOSStable, otherOS())),
			want: reject("PodOSSelectorNodeLabelDoesNotMatch", msgOSLabel),
		},
		{name: "spec.os matches", pod: pod("p", "", withOS(runtime.GOOS)), want: nodekit.Admitted},
		{
			name: "spec.os names another OS",
			pod:  pod("p", "", withOS(otherOS())),
			want: reject("PodOSNotSupported", msgOSField),
		},
		{
			name: "label is checked before spec.os",
			pod:  pod("p", "", withOS(otherOS()), withLabels(v1.LabelOSStable, otherOS())),
			want: reject("PodOSSelectorNodeLabelDoesNotMatch", msgOSLabel),
		},
		{
			name: "virtual node advertising another OS",
			node: admissiontest.Node{Labels: map[string]string{v1.LabelOSStable: otherOS()}},
			pod:  pod("p", "", withOS(otherOS()), withLabels(v1.LabelOSStable, otherOS())),
			want: nodekit.Admitted,
		},
		{
			name: "os in nodeSelector is a node affinity matter",
			pod:  pod("p", "", withNodeSelector(v1.LabelOSStable, otherOS())),
			want: reject("NodeAffinity", msgAffinity),
		},
		{
			name: "arch in nodeSelector is a node affinity matter",
			pod:  pod("p", "", withNodeSelector(v1.LabelArchStable, "s390x-"+runtime.GOARCH)),
			want: reject("NodeAffinity", msgAffinity),
		},
		{
			name: "arch in nodeSelector matches",
			pod:  pod("p", "", withNodeSelector(v1.LabelArchStable, runtime.GOARCH, v1.LabelOSStable, runtime.GOOS)),
			want: nodekit.Admitted,
		},
	})
}

func TestOSNodeWithoutLabelUsesGOOS(t *testing.T) {
	a := admission.NewOS(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return &v1.Node{}, nil }))
	ctx := context.Background()
	if d := a.Admit(ctx, nodekit.AdmitRequest{Pod: pod("p", "", withOS(runtime.GOOS))}); !d.Admit {
		t.Errorf("pod for %s: got %+v, want admitted", runtime.GOOS, d)
	}
	if d := a.Admit(ctx, nodekit.AdmitRequest{Pod: pod("p", "", withOS(otherOS()))}); d.Reason != "PodOSNotSupported" {
		t.Errorf("pod for %s: got %+v, want PodOSNotSupported", otherOS(), d)
	}
}

func TestSupplementalGroupsPolicy(t *testing.T) {
	policy := func(p v1.SupplementalGroupsPolicy) func(*v1.Pod) {
		return func(pod *v1.Pod) {
			pod.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: &p}
		}
	}
	node := func(supported *bool) admission.NodeGetter {
		return admission.NodeFunc(func(context.Context) (*v1.Node, error) {
			n := admissiontest.Node{}.Object()
			if supported != nil {
				n.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: supported}
			}
			return n, nil
		})
	}
	yes, no := true, false
	cases := []struct {
		name string
		node admission.NodeGetter
		pod  *v1.Pod
		want nodekit.Decision
	}{
		{"no policy", node(nil), pod("p", ""), nodekit.Admitted},
		{"merge on unsupported node", node(&no), pod("p", "", policy(v1.SupplementalGroupsPolicyMerge)), nodekit.Admitted},
		{"strict on supported node", node(&yes), pod("p", "", policy(v1.SupplementalGroupsPolicyStrict)), nodekit.Admitted},
		{
			"strict on node that says no", node(&no), pod("p", "", policy(v1.SupplementalGroupsPolicyStrict)),
			reject("SupplementalGroupsPolicyNotSupported", "SupplementalGroupsPolicy=Strict is not supported in this node"),
		},
		{
			"strict on node without features", node(nil), pod("p", "", policy(v1.SupplementalGroupsPolicyStrict)),
			reject("SupplementalGroupsPolicyNotSupported", "SupplementalGroupsPolicy=Strict is not supported in this node"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := admission.NewSupplementalGroupsPolicy(tc.node).Admit(context.Background(), nodekit.AdmitRequest{Pod: tc.pod})
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNodeAffinityAndName(t *testing.T) {
	zoneA := admissiontest.Node{Name: "n1", Labels: map[string]string{"zone": "a", "disk": "ssd"}}
	in := func(key string, values ...string) v1.NodeSelectorRequirement {
		return v1.NodeSelectorRequirement{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}
	}
	runDecisionCases(t, []decisionCase{
		{name: "selector matches", node: zoneA, pod: pod("p", "", withNodeSelector("zone", "a", "disk", "ssd")), want: nodekit.Admitted},
		{name: "selector mismatches", node: zoneA, pod: pod("p", "", withNodeSelector("zone", "b")), want: reject("NodeAffinity", msgAffinity)},
		{name: "selector on missing label", node: zoneA, pod: pod("p", "", withNodeSelector("gpu", "true")), want: reject("NodeAffinity", msgAffinity)},
		{name: "required affinity In matches", node: zoneA, pod: pod("p", "", withRequiredAffinity(in("zone", "a", "b"))), want: nodekit.Admitted},
		{name: "required affinity In mismatches", node: zoneA, pod: pod("p", "", withRequiredAffinity(in("zone", "c"))), want: reject("NodeAffinity", msgAffinity)},
		{
			name: "required affinity NotIn",
			node: zoneA,
			pod:  pod("p", "", withRequiredAffinity(v1.NodeSelectorRequirement{Key: "disk", Operator: v1.NodeSelectorOpNotIn, Values: []string{"ssd"}})),
			want: reject("NodeAffinity", msgAffinity),
		},
		{
			name: "selector and affinity must both match",
			node: zoneA,
			pod:  pod("p", "", withNodeSelector("zone", "a"), withRequiredAffinity(in("disk", "hdd"))),
			want: reject("NodeAffinity", msgAffinity),
		},
		{
			name: "field selector on metadata.name",
			node: zoneA,
			pod: pod("p", "", func(p *v1.Pod) {
				p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
						MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n2"}}},
					}}},
				}}
			}),
			want: reject("NodeAffinity", msgAffinity),
		},
		{
			name: "preferred terms are ignored",
			node: zoneA,
			pod: pod("p", "", func(p *v1.Pod) {
				p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
						Weight: 1, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in("zone", "z")}},
					}},
				}}
			}),
			want: nodekit.Admitted,
		},
		{name: "no node name", node: zoneA, pod: pod("p", ""), want: nodekit.Admitted},
		{name: "this node's name", node: zoneA, pod: pod("p", "", func(p *v1.Pod) { p.Spec.NodeName = "n1" }), want: nodekit.Admitted},
		{name: "another node's name", node: zoneA, pod: pod("p", "", func(p *v1.Pod) { p.Spec.NodeName = "n2" }), want: reject("NodeName", msgNodeName)},
	})
}

// freshNode is a NodeGetter whose cache lags behind the API server.
type freshNode struct {
	cached, fresh *v1.Node
	err           error
	calls         int
}

func (f *freshNode) Node(context.Context) (*v1.Node, error) { return f.cached, nil }
func (f *freshNode) FreshNode(context.Context) (*v1.Node, error) {
	f.calls++
	return f.fresh, f.err
}

var (
	_ admission.NodeGetter      = (*freshNode)(nil)
	_ admission.FreshNodeGetter = (*freshNode)(nil)
)

func TestNodeAffinityRechecksFreshNode(t *testing.T) {
	stale := admissiontest.Node{}.Object()
	labelled := admissiontest.Node{Labels: map[string]string{"role": "db"}}.Object()
	p := pod("p", "", withNodeSelector("role", "db"))
	cases := []struct {
		name      string
		getter    *freshNode
		want      nodekit.Decision
		wantCalls int
	}{
		{"fresh node has the label", &freshNode{cached: stale, fresh: labelled}, nodekit.Admitted, 1},
		{"fresh node lacks it too", &freshNode{cached: stale, fresh: stale}, reject("NodeAffinity", msgAffinity), 1},
		{"fresh fetch fails", &freshNode{cached: stale, err: errors.New("apiserver down")}, reject("NodeAffinity", msgAffinity), 1},
		{"cached node matches: no fetch", &freshNode{cached: labelled}, nodekit.Admitted, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := admission.NewNodeAffinity(tc.getter).Admit(context.Background(), nodekit.AdmitRequest{Pod: p})
			if got != tc.want || tc.getter.calls != tc.wantCalls {
				t.Errorf("got %+v after %d fresh fetches, want %+v after %d", got, tc.getter.calls, tc.want, tc.wantCalls)
			}
		})
	}
}

func TestTaintToleration(t *testing.T) {
	tainted := func(ts ...v1.Taint) admissiontest.Node { return admissiontest.Node{Taints: ts} }
	noExec := v1.Taint{Key: "maintenance", Value: "true", Effect: v1.TaintEffectNoExecute}
	noSched := v1.Taint{Key: "dedicated", Value: "gpu", Effect: v1.TaintEffectNoSchedule}
	prefer := v1.Taint{Key: "spot", Effect: v1.TaintEffectPreferNoSchedule}
	static := func(src string) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.source": src} }
	}
	runDecisionCases(t, []decisionCase{
		{name: "untainted node", node: tainted(), pod: pod("p", ""), want: nodekit.Admitted},
		{name: "untolerated NoExecute", node: tainted(noExec), pod: pod("p", ""), want: reject("TaintToleration", msgTaint)},
		{name: "untolerated NoSchedule is not checked", node: tainted(noSched), pod: pod("p", ""), want: nodekit.Admitted},
		{name: "untolerated PreferNoSchedule is not checked", node: tainted(prefer), pod: pod("p", ""), want: nodekit.Admitted},
		{
			name: "NoExecute tolerated with Equal",
			node: tainted(noSched, noExec),
			pod:  pod("p", "", withTolerations(v1.Toleration{Key: "maintenance", Operator: v1.TolerationOpEqual, Value: "true", Effect: v1.TaintEffectNoExecute})),
			want: nodekit.Admitted,
		},
		{
			name: "NoExecute tolerated with Exists and no effect",
			node: tainted(noExec),
			pod:  pod("p", "", withTolerations(v1.Toleration{Key: "maintenance", Operator: v1.TolerationOpExists})),
			want: nodekit.Admitted,
		},
		{
			name: "toleration with the wrong value",
			node: tainted(noExec),
			pod:  pod("p", "", withTolerations(v1.Toleration{Key: "maintenance", Operator: v1.TolerationOpEqual, Value: "false"})),
			want: reject("TaintToleration", msgTaint),
		},
		{
			name: "toleration for NoSchedule does not cover NoExecute",
			node: tainted(noExec),
			pod:  pod("p", "", withTolerations(v1.Toleration{Key: "maintenance", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule})),
			want: reject("TaintToleration", msgTaint),
		},
		{name: "static pod from a file is exempt", node: tainted(noExec), pod: pod("p", "", static("file")), want: nodekit.Admitted},
		{name: "pod from the API server is not", node: tainted(noExec), pod: pod("p", "", static("api")), want: reject("TaintToleration", msgTaint)},
	})
}

func TestNodeGetterFailure(t *testing.T) {
	broken := admission.NodeFunc(func(context.Context) (*v1.Node, error) { return nil, errors.New("no node yet") })
	nilNode := admission.NodeFunc(func(context.Context) (*v1.Node, error) { return nil, nil })
	want := reject("InvalidNodeInfo", "Kubelet cannot get node info.")
	for _, getter := range []admission.NodeGetter{broken, nilNode, nil} {
		d := admission.NewChain(admission.Builtins(getter)...).Admit(context.Background(), nodekit.AdmitRequest{Pod: pod("p", "")})
		if d != want {
			t.Errorf("got %+v, want %+v", d, want)
		}
	}
}
