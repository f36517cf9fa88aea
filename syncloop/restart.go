package syncloop

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// isSidecar reports whether an init container is restartable (a sidecar).
func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// shouldRestart applies the container's restart rules, then its own
// restart policy, then the pod's, to an exit code — as upstream does with
// container restart rules enabled.
func shouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.Action == v1.ContainerRestartRuleActionRestart && ruleMatches(rule, exitCode) {
				return true
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	}
	return true
}

func ruleMatches(rule v1.ContainerRestartRule, exitCode int) bool {
	if rule.ExitCodes == nil {
		return false
	}
	in := slices.Contains(rule.ExitCodes.Values, int32(exitCode))
	switch rule.ExitCodes.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}

// restartOnFailure is whether the pod restarts failed containers at all.
func restartOnFailure(pod *v1.Pod) bool {
	return pod.Spec.RestartPolicy != v1.RestartPolicyNever
}

// containerShouldStart decides whether a container that is not running
// should be (re)started, given its newest status.
func containerShouldStart(pod *v1.Pod, c *v1.Container, st *nodekit.ContainerStatus) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	if st == nil {
		return true
	}
	switch st.State {
	case nodekit.StateRunning:
		return false
	case nodekit.StateUnknown, nodekit.StateCreated:
		return true
	}
	return shouldRestart(c, &pod.Spec, st.ExitCode)
}
