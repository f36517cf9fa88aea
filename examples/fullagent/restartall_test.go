package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
)

// TestRestartAllContainers: a container exiting with a code that matches
// its RestartAllContainers rule restarts every container of the pod in
// place on containerd, as kubelet v1.37: the init container runs again
// (the regular container's new log shows its two runs), the sidecar and
// both regular containers are new containers, each container's restart
// count is 1 with a last termination, the sandbox (the pod IP) is kept,
// and the pod ends Running with AllContainersRestarting False.
func TestRestartAllContainers(t *testing.T) {
	e := startEnv(t)
	p := restartAllPod()
	p.Name = "restart-all"
	e.createPod(t, p)

	running := func(p *v1.Pod, names ...string) bool {
		for _, n := range names {
			if cs := containerStatus(p, n); cs == nil || cs.State.Running == nil {
				return false
			}
		}
		return true
	}
	first := e.waitPod(t, p.Name, 90*time.Second, "sidecar and containers running", func(p *v1.Pod) bool {
		return running(p, "side", "source", "regular")
	})
	before := map[string]string{}
	for _, n := range []string{"setup", "side", "source", "regular"} {
		before[n] = containerStatus(first, n).ContainerID
	}

	names := []string{"setup", "side", "source", "regular"}
	last := e.waitPod(t, p.Name, 120*time.Second, "every container restarted once and running", func(p *v1.Pod) bool {
		for _, n := range names {
			if cs := containerStatus(p, n); cs == nil || cs.RestartCount < 1 {
				return false
			}
		}
		return p.Status.Phase == v1.PodRunning && running(p, "side", "source", "regular")
	})
	for _, n := range names {
		cs := containerStatus(last, n)
		if cs.RestartCount != 1 {
			t.Errorf("%s: restartCount %d, want 1", n, cs.RestartCount)
		}
		if cs.LastTerminationState.Terminated == nil {
			t.Errorf("%s: no lastTerminationState", n)
		}
		if cs.ContainerID == "" || cs.ContainerID == before[n] {
			t.Errorf("%s: container ID %q, want a new one (was %q)", n, cs.ContainerID, before[n])
		}
	}
	if st := containerStatus(last, "setup").State.Terminated; st == nil || st.ExitCode != 0 {
		t.Errorf("setup: state %+v, want terminated with 0 (it ran again)", containerStatus(last, "setup").State)
	}
	if last.Status.PodIP == "" || last.Status.PodIP != first.Status.PodIP {
		t.Errorf("pod IP %q, was %q: the sandbox should be kept", last.Status.PodIP, first.Status.PodIP)
	}
	var restarting *v1.PodCondition
	for i := range last.Status.Conditions {
		if last.Status.Conditions[i].Type == v1.AllContainersRestarting {
			restarting = &last.Status.Conditions[i]
		}
	}
	if restarting == nil || restarting.Status != v1.ConditionFalse {
		t.Errorf("AllContainersRestarting %+v, want False", restarting)
	}
	b, err := e.client.CoreV1().Pods("default").GetLogs(p.Name, &v1.PodLogOptions{Container: "regular"}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "ran"); got != 2 {
		t.Errorf("regular's log %q: init container ran %d times, want 2", b, got)
	}
	t.Logf("final status: %s", describeStatus(last))
}

// restartAllPod is the test's pod: an init container noting each run in
// an emptyDir, a sidecar, a container that exits 42 (its
// RestartAllContainers code) the first time, and one that prints the init
// container's runs. Images are left to the caller.
func restartAllPod() *v1.Pod {
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	mnt := []v1.VolumeMount{{Name: "work", MountPath: "/mnt"}}
	p := &v1.Pod{Spec: v1.PodSpec{
		RestartPolicy: v1.RestartPolicyNever,
		Volumes:       []v1.Volume{{Name: "work", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		InitContainers: []v1.Container{
			{Name: "setup", Command: []string{"sh", "-c", "echo ran >> /mnt/init-runs"}, VolumeMounts: mnt},
			{Name: "side", Command: []string{"sh", "-c", "exec sleep 3600"}, RestartPolicy: &always},
		},
		Containers: []v1.Container{
			{
				Name:          "source",
				Command:       []string{"sh", "-c", "if [ -f /mnt/done ]; then exec sleep 3600; fi; touch /mnt/done; sleep 5; exit 42"},
				RestartPolicy: &never, VolumeMounts: mnt,
				RestartPolicyRules: []v1.ContainerRestartRule{{
					Action:    v1.ContainerRestartRuleActionRestartAllContainers,
					ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
				}},
			},
			{Name: "regular", Command: []string{"sh", "-c", "cat /mnt/init-runs; exec sleep 3600"}, VolumeMounts: mnt},
		},
	}}
	return p
}

// TestRestartAllSideBySide runs restartAllPod on kubelet v1.37.2 and on
// fullagent (containerd 1.6 each) and compares what the API shows once
// every container has restarted: phase, the kubelet-owned conditions, each
// container's state, restart count and last termination, and how often
// the init container ran.
func TestRestartAllSideBySide(t *testing.T) {
	client, agents := startSideBySide(t, agenttest.ContainerdVersion16)
	ctx := t.Context()
	for _, a := range agents {
		p := restartAllPod()
		p.Name, p.Namespace, p.Spec.NodeName = a.name+"-restart-all", "default", a.node
		for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range list {
				list[i].Image = agenttest.BusyboxImage
			}
		}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for _, a := range agents {
		name := a.name + "-restart-all"
		var last *v1.Pod
		err := wait.PollUntilContextTimeout(ctx, time.Second, 150*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			for _, cs := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if cs.RestartCount < 1 || (cs.Name != "setup" && cs.State.Running == nil) {
					return false, nil
				}
			}
			return len(p.Status.ContainerStatuses) == 2 && p.Status.Phase == v1.PodRunning, nil
		})
		if err != nil {
			t.Fatalf("%s: not restarted within 150s: %s", a.name, describeStatus(last))
		}
		b, err := client.CoreV1().Pods("default").GetLogs(name, &v1.PodLogOptions{Container: "regular"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[a.name] = restartAllSummary(last) + fmt.Sprintf("\ninit runs=%d", strings.Count(string(b), "ran"))
		t.Logf("%s:\n%s", a.name, got[a.name])
	}
	if got["kubelet"] != got["fullagent"] {
		t.Errorf("kubelet and fullagent differ:\nkubelet:\n%s\nfullagent:\n%s", got["kubelet"], got["fullagent"])
	}
}

// restartAllSummary prints what TestRestartAllSideBySide compares.
func restartAllSummary(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", p.Status.Phase)
	conds := map[v1.PodConditionType]v1.PodCondition{}
	for _, c := range p.Status.Conditions {
		conds[c.Type] = c
	}
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.AllContainersRestarting} {
		c := conds[t]
		fmt.Fprintf(&b, " %s=%s(%s)", t, c.Status, c.Reason)
	}
	for _, cs := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "\n%s: %s restarts=%d ready=%v", cs.Name, stateName(cs.State), cs.RestartCount, cs.Ready)
		if lt := cs.LastTerminationState.Terminated; lt != nil {
			fmt.Fprintf(&b, " last=%s(%d) %q", lt.Reason, lt.ExitCode, lt.Message)
		}
	}
	return b.String()
}

func stateName(s v1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s(%d)", s.Terminated.Reason, s.Terminated.ExitCode)
	case s.Waiting != nil:
		return "waiting " + s.Waiting.Reason
	}
	return "unknown"
}
