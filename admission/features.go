package admission

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// Node features the PodFeatures admitter names when a pod needs one nodekit
// does not have. They are the feature names upstream uses (feature gates,
// as in the node's status.declaredFeatures).
const (
	FeatureDynamicResourceAllocation            = "DynamicResourceAllocation"
	FeatureRestartAllContainersOnContainerExits = "RestartAllContainersOnContainerExits"
)

// PodFeatures rejects a pod that needs a node feature nodekit does not
// implement, instead of running it without, as upstream kubelet's
// pod-features and declared-features admit handlers (see DeclaredFeatures
// for the latter, which reads the node's declared list), whose reason is
// PodFeatureUnsupported and whose message starts "Pod requires node
// features that are not available: ". It checks, in order:
//
//   - dynamic resource allocation: spec.resourceClaims, a container's
//     resources.claims, or status.extendedResourceClaimStatus (a DRA-backed
//     extended resource), unless built WithDynamicResources (the agent
//     prepares claims). The pod would run without its devices; the
//     message names the claims.
//   - restartPolicyRules with action RestartAllContainers, only when built
//     WithoutRestartAllContainers (the RestartAllContainersOnContainerExits
//     gate is off): the sync loop restarts all containers in place (beta
//     and on in v1.37), but with the gate off the node would treat such a
//     rule as if it were not there; the message names the container and
//     the rule.
//
// Pod-level resources (spec.resources) are acted on (cgroups, QoS,
// admission) and not refused here. PodFeatures reads only the pod.
//
// NewPodFeatures(WithDynamicResources()) admits pods with claims: the
// agent prepares them (package dra).
type PodFeatures struct {
	refuseRestartAll bool
	dynamicResources bool
}

var _ nodekit.Admitter = (*PodFeatures)(nil)

// PodFeaturesOption changes what PodFeatures refuses.
type PodFeaturesOption func(*PodFeatures)

// WithoutRestartAllContainers refuses pods with a RestartAllContainers
// restart rule: for an agent whose RestartAllContainersOnContainerExits
// gate is off, or whose runtime cannot remove containers
// (syncloop.ContainerRemover).
func WithoutRestartAllContainers() PodFeaturesOption {
	return func(p *PodFeatures) { p.refuseRestartAll = true }
}

// WithDynamicResources says the agent prepares DRA claims, so pods using
// them are admitted.
func WithDynamicResources() PodFeaturesOption {
	return func(p *PodFeatures) { p.dynamicResources = true }
}

// NewPodFeatures returns the PodFeatures admitter; without options it
// admits RestartAllContainers rules, as kubelet v1.37 with its default
// gates, and refuses pods with DRA claims.
func NewPodFeatures(opts ...PodFeaturesOption) *PodFeatures {
	p := &PodFeatures{}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Admit implements nodekit.Admitter.
func (p *PodFeatures) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	pod := req.Pod
	if claims := resourceClaimsOf(pod); len(claims) > 0 && !p.dynamicResources {
		return featureUnsupported(FeatureDynamicResourceAllocation,
			fmt.Sprintf("resource claims %s: this node does not prepare dynamic resources", strings.Join(claims, ", ")))
	}
	if !p.refuseRestartAll {
		return nodekit.Admitted
	}
	if name, i, ok := restartrules.UsesRestartAll(&pod.Spec); ok {
		return featureUnsupported(FeatureRestartAllContainersOnContainerExits,
			fmt.Sprintf("container %q restartPolicyRules[%d] has action %s: this node does not restart all containers in place",
				name, i, v1.ContainerRestartRuleActionRestartAllContainers))
	}
	return nodekit.Admitted
}

func featureUnsupported(feature, detail string) nodekit.Decision {
	return nodekit.Decision{
		Reason:  ReasonPodFeatureUnsupported,
		Message: messagePodFeatureUnsupported + feature + " (" + detail + ")",
	}
}

// resourceClaimsOf lists, quoted and in order, the DRA claims pod uses:
// spec.resourceClaims by name, the claims containers reference that the
// pod does not list (the API server forbids that; a static pod may not be
// validated), and the claim of status.extendedResourceClaimStatus.
func resourceClaimsOf(pod *v1.Pod) []string {
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, fmt.Sprintf("%q", name))
		}
	}
	for _, c := range pod.Spec.ResourceClaims {
		add(c.Name)
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, rc := range c.Resources.Claims {
				add(rc.Name)
			}
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		add(st.ResourceClaimName)
	}
	return out
}
