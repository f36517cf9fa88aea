package podstatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

func restartAllOn(codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{
		Action:    v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: codes},
	}
}

func rtContainer(name string, state nodekit.State, code int) *nodekit.ContainerStatus {
	return &nodekit.ContainerStatus{ID: nodekit.ContainerID{Type: "fake", ID: name}, Name: name, State: state, ExitCode: code}
}

// The AllContainersRestarting condition, as upstream's
// GenerateAllContainersRestartingCondition: True while a RestartAllContainers
// exit is being handled and containers remain in the runtime, False once
// they are all removed, and False with the terminal phase's reason.
func TestAllContainersRestarting(t *testing.T) {
	pod := withInit(testPod(v1.RestartPolicyNever,
		withRules(ctr("source"), v1.ContainerRestartPolicyNever, restartAllOn(42)), ctr("regular")), ctr("setup"))
	trueCond := &v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue}}}
	for _, tc := range []struct {
		name    string
		runtime *nodekit.PodStatus
		old     *v1.PodStatus
		phase   v1.PodPhase
		want    v1.PodCondition
	}{
		{
			name:    "all running",
			runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("source", nodekit.StateRunning, 0), rtContainer("regular", nodekit.StateRunning, 0)}},
			phase:   v1.PodRunning, want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse},
		},
		{
			name:    "source exited with the rule's code",
			runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("source", nodekit.StateExited, 42), rtContainer("regular", nodekit.StateRunning, 0)}},
			phase:   v1.PodRunning,
			want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue,
				Reason: "RestartAllContainersStarted", Message: "container exited with restart policy rule"},
		},
		{
			name:    "source exited with another code",
			runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("source", nodekit.StateExited, 1), rtContainer("regular", nodekit.StateRunning, 0)}},
			phase:   v1.PodRunning, want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse},
		},
		{
			name:    "old True, a container still in the runtime",
			runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("setup", nodekit.StateExited, 0)}},
			old:     trueCond, phase: v1.PodRunning,
			want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue,
				Reason: "RestartAllContainersStarted", Message: "container exited with restart policy rule"},
		},
		{
			name:    "old True, all removed",
			runtime: &nodekit.PodStatus{}, old: trueCond, phase: v1.PodRunning,
			want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse},
		},
		{
			name:    "old status shows the exit",
			runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("regular", nodekit.StateRunning, 0)}},
			old:     &v1.PodStatus{ContainerStatuses: statuses(exited("source", 42))}, phase: v1.PodRunning,
			want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue,
				Reason: "RestartAllContainersStarted", Message: "container exited with restart policy rule"},
		},
		{
			name:    "failed pod",
			runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("source", nodekit.StateExited, 42)}},
			phase:   v1.PodFailed, want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse, Reason: "PodFailed"},
		},
		{
			name: "succeeded pod", phase: v1.PodSucceeded,
			want: v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse, Reason: "PodCompleted"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AllContainersRestarting(pod, tc.runtime, tc.old, tc.phase); got != tc.want {
				t.Errorf("condition\n got: %+v\nwant: %+v", got, tc.want)
			}
		})
	}
}

// Generate adds AllContainersRestarting only to a pod with a
// RestartAllContainers rule, last, as upstream.
func TestGenerateAllContainersRestarting(t *testing.T) {
	plain := testPod(v1.RestartPolicyAlways, ctr("app"))
	res := Generate(Input{Pod: plain, Containers: statuses(running("app", true))})
	if c := Find(res.Conditions, v1.AllContainersRestarting); c != nil {
		t.Errorf("pod without a RestartAllContainers rule got %+v", c)
	}
	pod := testPod(v1.RestartPolicyNever, withRules(ctr("app"), v1.ContainerRestartPolicyNever, restartAllOn(42)))
	res = Generate(Input{Pod: pod, Containers: statuses(running("app", true)),
		Runtime: &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{rtContainer("app", nodekit.StateRunning, 0)}}})
	if n := len(res.Conditions); n == 0 || res.Conditions[n-1].Type != v1.AllContainersRestarting || res.Conditions[n-1].Status != v1.ConditionFalse {
		t.Errorf("conditions %+v, want AllContainersRestarting False last", res.Conditions)
	}
}

// A container removed to restart all the pod's containers waits with a
// RestartingAllContainers last termination (exit 137): it counts as
// restarting, so a Never pod whose containers were all removed is Running,
// not Failed, as upstream's getPhase.
func TestPhaseRestartingAll(t *testing.T) {
	removed := func(name string) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name,
			State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonRestartingAllContainers}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: ReasonRestartingAllContainers, ExitCode: 137}}}
	}
	pod := withInit(testPod(v1.RestartPolicyNever,
		withRules(ctr("source"), v1.ContainerRestartPolicyNever, restartAllOn(42)), ctr("regular")), ctr("setup"))
	if got := Phase(pod, statuses(removed("setup"), removed("source"), removed("regular")), false, false); got != v1.PodRunning {
		t.Errorf("all removed: phase %s, want Running", got)
	}
	// The same exit 137 without that reason is final in a Never pod.
	killed := backingOff("regular", 137)
	if got := Phase(pod, statuses(completedInit("setup"), exited("source", 1), killed), false, true); got != v1.PodFailed {
		t.Errorf("regular killed for good: phase %s, want Failed", got)
	}
	// The exit that triggers the restart counts as a restart too.
	if got := Phase(pod, statuses(completedInit("setup"), exited("source", 42), exited("regular", 0)), false, true); got != v1.PodRunning {
		t.Errorf("source exited 42: phase %s, want Running", got)
	}
}
