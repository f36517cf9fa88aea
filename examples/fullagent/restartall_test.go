package main

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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
