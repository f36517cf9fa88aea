package restartrules_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/restartrules"
	"github.com/nodekit/nodekit/internal/restartrules/restartrulestest"
)

func TestRestarts(t *testing.T) {
	for _, tc := range restartrulestest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			c := tc.Container("c")
			if got := restartrules.Restarts(&c, tc.PodPolicy, tc.ExitCode); got != tc.Restarts {
				t.Errorf("Restarts = %v, want %v", got, tc.Restarts)
			}
		})
	}
}

func TestMatchIsFirstMatch(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	c := v1.Container{Name: "c", RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{
		{Action: v1.ContainerRestartRuleActionRestart, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: "Unknown", Values: []int32{1}}},
		{Action: v1.ContainerRestartRuleActionRestartAllContainers, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0}}},
		{Action: v1.ContainerRestartRuleActionRestart, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{1}}},
	}}
	r, ok := restartrules.Match(&c, 1)
	if !ok || r.Action != v1.ContainerRestartRuleActionRestartAllContainers {
		t.Errorf("Match(1) = %+v, %v; want the NotIn rule (an unknown operator never matches)", r, ok)
	}
	if _, ok := restartrules.Match(&c, 0); ok {
		t.Errorf("Match(0) matched")
	}
}

func TestUsesRestartAll(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	spec := v1.PodSpec{Containers: []v1.Container{{Name: "a"}, {Name: "b", RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{
		{Action: v1.ContainerRestartRuleActionRestart},
		{Action: v1.ContainerRestartRuleActionRestartAllContainers},
	}}}}
	if name, i, ok := restartrules.UsesRestartAll(&spec); !ok || name != "b" || i != 1 {
		t.Errorf("UsesRestartAll = %q, %d, %v", name, i, ok)
	}
	spec.Containers[1].RestartPolicyRules = spec.Containers[1].RestartPolicyRules[:1]
	if _, _, ok := restartrules.UsesRestartAll(&spec); ok {
		t.Errorf("UsesRestartAll found one in a pod without")
	}
}

func TestTriggersRestartAll(t *testing.T) {
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	rule := func(a v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: a, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	all, restart := v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleActionRestart
	in, notIn := v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn
	for _, tc := range []struct {
		name   string
		policy *v1.ContainerRestartPolicy
		rules  []v1.ContainerRestartRule
		code   int32
		want   bool
	}{
		{"In matches", &never, []v1.ContainerRestartRule{rule(all, in, 42)}, 42, true},
		{"In misses", &never, []v1.ContainerRestartRule{rule(all, in, 42)}, 1, false},
		{"NotIn on a sidecar", &always, []v1.ContainerRestartRule{rule(all, notIn, 0)}, 3, true},
		{"an earlier Restart match wins", &never, []v1.ContainerRestartRule{rule(restart, in, 42), rule(all, in, 42)}, 42, false},
		{"no container policy: rules not read", nil, []v1.ContainerRestartRule{rule(all, in, 42)}, 42, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := v1.Container{Name: "c", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
			if got := restartrules.TriggersRestartAll(&c, tc.code); got != tc.want {
				t.Errorf("TriggersRestartAll = %v, want %v", got, tc.want)
			}
		})
	}
}
