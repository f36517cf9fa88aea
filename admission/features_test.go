package admission_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

func withClaims(names ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		for _, n := range names {
			tmpl := n + "-template"
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: n, ResourceClaimTemplateName: &tmpl})
			p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: n})
		}
	}
}

func withRestartRule(container int, init bool, policy v1.ContainerRestartPolicy, rules ...v1.ContainerRestartRule) func(*v1.Pod) {
	return func(p *v1.Pod) {
		list := p.Spec.Containers
		if init {
			list = p.Spec.InitContainers
		}
		list[container].RestartPolicy = &policy
		list[container].RestartPolicyRules = rules
	}
}

func onExit(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

func TestPodFeatures(t *testing.T) {
	node := admissiontest.Node{Name: "n1", Allocatable: res("cpu=4,memory=4Gi,pods=110")}
	const prefix = "Pod requires node features that are not available: "
	restartAll := onExit(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	restart := onExit(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	runDecisionCases(t, []decisionCase{
		{name: "plain pod admitted", node: node, pod: pod("p", "cpu=1"), want: nodekit.Admitted},
		{
			name: "resource claims named", node: node, pod: pod("p", "cpu=1", withClaims("gpu", "nic")),
			want: reject("PodFeatureUnsupported", prefix+`DynamicResourceAllocation (resource claims "gpu", "nic": this node does not prepare dynamic resources)`),
		},
		{
			name: "a container claim the pod does not list", node: node,
			pod: pod("p", "cpu=1", func(p *v1.Pod) {
				p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "orphan"}}
			}),
			want: reject("PodFeatureUnsupported", prefix+`DynamicResourceAllocation (resource claims "orphan": this node does not prepare dynamic resources)`),
		},
		{
			name: "a DRA-backed extended resource", node: node,
			pod: pod("p", "cpu=1", func(p *v1.Pod) {
				p.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended-resources-x"}
			}),
			want: reject("PodFeatureUnsupported", prefix+`DynamicResourceAllocation (resource claims "p-extended-resources-x": this node does not prepare dynamic resources)`),
		},
		{
			name: "restart rule RestartAllContainers admitted (gate on)", node: node,
			pod:  pod("p", "cpu=1", withRestartRule(0, false, v1.ContainerRestartPolicyNever, restart, restartAll)),
			want: nodekit.Admitted,
		},
		{
			name: "restart rule Restart admitted", node: node,
			pod:  pod("p", "cpu=1", withRestartRule(0, false, v1.ContainerRestartPolicyNever, restart)),
			want: nodekit.Admitted,
		},
		{
			name: "pod-level resources admitted (acted on)", node: node,
			pod: pod("p", "", func(p *v1.Pod) {
				p.Spec.Resources = &v1.ResourceRequirements{Requests: res("cpu=1"), Limits: res("cpu=1")}
			}),
			want: nodekit.Admitted,
		},
	})
}

// TestPodFeaturesWithoutRestartAll: with the RestartAllContainersOnContainerExits
// gate off, a pod with a RestartAllContainers rule is refused, naming the
// container and the rule; a Restart rule is still admitted.
func TestPodFeaturesWithoutRestartAll(t *testing.T) {
	const prefix = "Pod requires node features that are not available: "
	restartAll := onExit(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	restart := onExit(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	pf := admission.NewPodFeatures(admission.WithoutRestartAllContainers())
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want nodekit.Decision
	}{
		{
			name: "regular container", pod: pod("p", "cpu=1", withRestartRule(0, false, v1.ContainerRestartPolicyNever, restart, restartAll)),
			want: reject("PodFeatureUnsupported", prefix+`RestartAllContainersOnContainerExits (container "app" restartPolicyRules[1] has action RestartAllContainers: this node does not restart all containers in place)`),
		},
		{
			name: "init container", pod: pod("p", "cpu=1", withInit(container("setup", "")), withRestartRule(0, true, v1.ContainerRestartPolicyNever, restartAll)),
			want: reject("PodFeatureUnsupported", prefix+`RestartAllContainersOnContainerExits (container "setup" restartPolicyRules[0] has action RestartAllContainers: this node does not restart all containers in place)`),
		},
		{name: "Restart rule admitted", pod: pod("p", "cpu=1", withRestartRule(0, false, v1.ContainerRestartPolicyNever, restart)), want: nodekit.Admitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pf.Admit(t.Context(), nodekit.AdmitRequest{Pod: tc.pod}); got != tc.want {
				t.Errorf("decision\n got: %+v\nwant: %+v", got, tc.want)
			}
		})
	}
}

// TestPodFeaturesWithDynamicResources: an agent that prepares claims
// admits pods using them, and still refuses what it lacks.
func TestPodFeaturesWithDynamicResources(t *testing.T) {
	pf := admission.NewPodFeatures(admission.WithDynamicResources())
	if d := pf.Admit(t.Context(), nodekit.AdmitRequest{Pod: pod("p", "cpu=1", withClaims("gpu"))}); !d.Admit {
		t.Fatalf("pod with claims refused: %+v", d)
	}
	restartAll := onExit(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42)
	p := pod("p", "cpu=1", withClaims("gpu"), withRestartRule(0, false, v1.ContainerRestartPolicyNever, restartAll))
	if d := admission.NewPodFeatures(admission.WithDynamicResources(), admission.WithoutRestartAllContainers()).Admit(t.Context(), nodekit.AdmitRequest{Pod: p}); d.Admit || d.Reason != "PodFeatureUnsupported" {
		t.Fatalf("RestartAllContainers with claims, the gate off: %+v", d)
	}
	if d := admission.NewPodFeatures().Admit(t.Context(), nodekit.AdmitRequest{Pod: pod("p", "cpu=1", withClaims("gpu"))}); d.Admit {
		t.Fatal("pod with claims admitted without WithDynamicResources")
	}
}
