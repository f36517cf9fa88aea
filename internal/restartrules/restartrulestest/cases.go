// Package restartrulestest holds the table of restart decisions that the
// sync loop, the status manager and the probe workers are each tested
// against, so the three are shown to follow one rule.
package restartrulestest

import v1 "k8s.io/api/core/v1"

// Case is one exit of one container: whether it runs again.
type Case struct {
	Name      string
	PodPolicy v1.RestartPolicy
	// Policy is the container's own restartPolicy; nil for none.
	Policy   *v1.ContainerRestartPolicy
	Rules    []v1.ContainerRestartRule
	ExitCode int32
	Restarts bool
}

// Container returns a regular container named name with the case's policy
// and rules.
func (c Case) Container(name string) v1.Container {
	return v1.Container{Name: name, Image: "busybox", RestartPolicy: c.Policy, RestartPolicyRules: c.Rules}
}

func policy(p v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &p }

func rule(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

// Cases returns a new copy of the table.
func Cases() []Case {
	const (
		restart    = v1.ContainerRestartRuleActionRestart
		restartAll = v1.ContainerRestartRuleActionRestartAllContainers
		in         = v1.ContainerRestartRuleOnExitCodesOpIn
		notIn      = v1.ContainerRestartRuleOnExitCodesOpNotIn
	)
	never, onFailure, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyAlways
	return []Case{
		{Name: "pod Never", PodPolicy: v1.RestartPolicyNever, ExitCode: 1, Restarts: false},
		{Name: "pod OnFailure, failed", PodPolicy: v1.RestartPolicyOnFailure, ExitCode: 1, Restarts: true},
		{Name: "pod OnFailure, succeeded", PodPolicy: v1.RestartPolicyOnFailure, ExitCode: 0, Restarts: false},
		{Name: "pod Always, succeeded", PodPolicy: v1.RestartPolicyAlways, ExitCode: 0, Restarts: true},
		{Name: "container Never overrides pod OnFailure", PodPolicy: v1.RestartPolicyOnFailure, Policy: policy(never), ExitCode: 1, Restarts: false},
		{Name: "container OnFailure overrides pod Never", PodPolicy: v1.RestartPolicyNever, Policy: policy(onFailure), ExitCode: 2, Restarts: true},
		{Name: "container Always overrides pod Never", PodPolicy: v1.RestartPolicyNever, Policy: policy(always), ExitCode: 0, Restarts: true},
		{Name: "rule In matches", PodPolicy: v1.RestartPolicyNever, Policy: policy(never), Rules: []v1.ContainerRestartRule{rule(restart, in, 42)}, ExitCode: 42, Restarts: true},
		{Name: "rule In misses", PodPolicy: v1.RestartPolicyNever, Policy: policy(never), Rules: []v1.ContainerRestartRule{rule(restart, in, 42)}, ExitCode: 1, Restarts: false},
		{Name: "rule NotIn matches", PodPolicy: v1.RestartPolicyNever, Policy: policy(never), Rules: []v1.ContainerRestartRule{rule(restart, notIn, 0)}, ExitCode: 3, Restarts: true},
		{Name: "rule NotIn misses", PodPolicy: v1.RestartPolicyNever, Policy: policy(never), Rules: []v1.ContainerRestartRule{rule(restart, notIn, 0)}, ExitCode: 0, Restarts: false},
		{Name: "second rule matches", PodPolicy: v1.RestartPolicyNever, Policy: policy(never), Rules: []v1.ContainerRestartRule{rule(restart, in, 1), rule(restart, in, 7)}, ExitCode: 7, Restarts: true},
		{
			// The first match decides: RestartAllContainers restarts the
			// container (with all the others) despite its Never.
			Name: "first match RestartAllContainers restarts despite container Never", PodPolicy: v1.RestartPolicyNever, Policy: policy(never),
			Rules: []v1.ContainerRestartRule{rule(restartAll, in, 42), rule(restart, notIn, 42)}, ExitCode: 42, Restarts: true,
		},
		{
			// A first match with Restart shadows a later RestartAllContainers.
			Name: "first match Restart shadows a later RestartAllContainers", PodPolicy: v1.RestartPolicyNever, Policy: policy(never),
			Rules: []v1.ContainerRestartRule{rule(restart, in, 1), rule(restartAll, in, 1)}, ExitCode: 1, Restarts: true,
		},
		{
			Name: "RestartAllContainers rule misses: container Never decides", PodPolicy: v1.RestartPolicyAlways, Policy: policy(never),
			Rules: []v1.ContainerRestartRule{rule(restartAll, in, 42)}, ExitCode: 1, Restarts: false,
		},
		{
			Name: "rule without exit codes never matches", PodPolicy: v1.RestartPolicyNever, Policy: policy(never),
			Rules: []v1.ContainerRestartRule{{Action: restart}}, ExitCode: 1, Restarts: false,
		},
		{
			Name: "rules ignored without a container policy", PodPolicy: v1.RestartPolicyNever,
			Rules: []v1.ContainerRestartRule{rule(restart, in, 42)}, ExitCode: 42, Restarts: false,
		},
	}
}
