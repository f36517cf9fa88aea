// Package restartrules decides whether a container that exited runs again:
// its restartPolicyRules (ContainerRestartRules, on by default in v1.37),
// then its own restartPolicy, then the pod's. The sync loop, the status
// manager and the probe workers all ask here, so they never disagree about
// whether an exit is final.
//
// A first matching rule with action RestartAllContainers
// (RestartAllContainersOnContainerExits, beta and on in v1.37) counts as a
// restart here, as upstream with the gate on: the container runs again, as
// do all the others (TriggersRestartAll says which exits start that). With
// the gate off the agent refuses such pods at admission, so these rules
// never meet a pod whose rule would fall back to the container's policy.
//
// What restarting all containers means, as kubelet v1.37.2 does it (the
// sync loop, internal/podstatus and the status manager follow it):
//   - Trigger: the newest runtime instance of an init, sidecar or regular
//     container exited (or the last status shows it terminated) with a
//     code whose first matching rule has action RestartAllContainers; or
//     the last status has the AllContainersRestarting condition True.
//   - The sync that sees it generates AllContainersRestarting True
//     (reason RestartAllContainersStarted, message "container exited with
//     restart policy rule", no observedGeneration), then, instead of the
//     usual actions, kills (grace 0, raised to the runtime's 2 s minimum;
//     a Killing event "killing") and removes every runtime instance of the
//     init and regular containers: the other regular containers, the
//     other init containers, then the regular and last the init
//     containers that triggered it. Ephemeral containers and the sandbox
//     are kept, so the pod keeps its IP and volumes. The pod is synced
//     again at once.
//   - That sync finds no container left: AllContainersRestarting becomes
//     False (no reason), and each container the last status showed not
//     waiting is waiting with reason RestartingAllContainers ("The
//     container is removed because RestartAllContainers in place"), a
//     last termination with that reason and exit code 137, and one more
//     restart. Then the containers start as in a new sandbox: init
//     containers again from the first, sidecars, then the regular ones.
//     Crash-loop back-off does not hold them (no exited instance is left).
//   - The new instances keep the restart count (never below the last
//     status's; one more for a container last seen terminated) and the
//     last termination. A container removed with reason
//     RestartingAllContainers counts as restarting in the phase, so a
//     Never pod is not Failed meanwhile; it is Pending while its init
//     containers run again and Initialized stays True once it was. A pod
//     with a RestartAllContainers rule is exempt from the status manager's
//     terminated-to-running check. The condition is generated only for
//     pods with such a rule; in a terminal phase it is False with reason
//     PodCompleted or PodFailed.
package restartrules

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Match returns the first of c's restart rules whose exit-code clause
// matches exitCode. Rules are tried in order; the first match wins even if
// a later rule would match too. A rule without exitCodes, or with an
// operator it does not know, never matches.
func Match(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return r, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return r, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// Restarts reports whether container c of a pod with restart policy
// podPolicy runs again after exiting with exitCode. Rules apply only to a
// container with its own restartPolicy (the API server allows them only
// there): a first matching rule with action Restart or RestartAllContainers
// restarts it; any other match, or none, leaves the decision to the
// container's restartPolicy.
// Without one the pod's policy decides (an empty one is Always). It does
// not look at sidecars specially: a sidecar's policy is Always.
func Restarts(c *v1.Container, podPolicy v1.RestartPolicy, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if r, ok := Match(c, exitCode); ok {
			switch r.Action {
			case v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers:
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
	switch podPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	}
	return true
}

// TriggersRestartAll reports whether c exiting with exitCode restarts all
// the pod's containers: its first matching rule has action
// RestartAllContainers. Like Restarts it reads the rules only of a
// container with its own restartPolicy (the API server allows them only
// there).
func TriggersRestartAll(c *v1.Container, exitCode int32) bool {
	if c.RestartPolicy == nil {
		return false
	}
	r, ok := Match(c, exitCode)
	return ok && r.Action == v1.ContainerRestartRuleActionRestartAllContainers
}

// UsesRestartAll returns the first init or regular container of spec with a
// rule whose action is RestartAllContainers, and that rule's index; ok is
// false when there is none: only then may the pod's containers all restart
// (upstream's AllContainersCouldRestart). Admission refuses such pods when
// the RestartAllContainersOnContainerExits gate is off.
func UsesRestartAll(spec *v1.PodSpec) (container string, rule int, ok bool) {
	for _, list := range [][]v1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			for i, r := range c.RestartPolicyRules {
				if r.Action == v1.ContainerRestartRuleActionRestartAllContainers {
					return c.Name, i, true
				}
			}
		}
	}
	return "", 0, false
}
