package podstatus

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Builders for the tables: a pod, its containers, and container statuses in
// the states upstream's tests use.

func testPod(policy v1.RestartPolicy, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", Generation: 1},
		Spec:       v1.PodSpec{RestartPolicy: policy, Containers: containers},
	}
}

func withInit(pod *v1.Pod, inits ...v1.Container) *v1.Pod {
	pod.Spec.InitContainers = inits
	return pod
}

func ctr(name string) v1.Container { return v1.Container{Name: name, Image: "busybox"} }

func sidecar(name string) v1.Container {
	c := ctr(name)
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// withRules gives c its own restart policy and restart rules.
func withRules(c v1.Container, policy v1.ContainerRestartPolicy, rules ...v1.ContainerRestartRule) v1.Container {
	c.RestartPolicy = &policy
	c.RestartPolicyRules = rules
	return c
}

func restartOn(op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes},
	}
}

func running(name string, ready bool) v1.ContainerStatus {
	started := true
	return v1.ContainerStatus{Name: name, Ready: ready, Started: &started,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
}

// runningNotStarted is a container whose startup probe has not passed.
func runningNotStarted(name string) v1.ContainerStatus {
	s := running(name, false)
	started := false
	s.Started = &started
	return s
}

func exited(name string, code int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, Ready: false,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

// completedInit is an init container that exited 0; it counts as ready.
func completedInit(name string) v1.ContainerStatus {
	s := exited(name, 0)
	s.Ready = true
	return s
}

func waiting(name string) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name,
		State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonContainerCreating}}}
}

// backingOff waits to run again after exiting with code.
func backingOff(name string, code int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name,
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

func statuses(s ...v1.ContainerStatus) []v1.ContainerStatus { return s }
