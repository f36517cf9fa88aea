package main

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
)

// TestUnsupportedPodFeatures: what nodekit does not build is refused or
// reported, never ignored. A pod with an nfs volume (no plugin) waits in
// ContainerCreating with upstream's FailedMount event, retried with
// back-off (a handful of events in 10 s, not a loop); a pod whose DRA
// claim does not exist yet waits with FailedPrepareDynamicResources on
// containerd 2, and fails admission with PodFeatureUnsupported on
// containerd 1.6, which cannot inject CDI devices. (RestartAllContainers
// rules are acted on: restartall_test.go.)
func TestUnsupportedPodFeatures(t *testing.T) {
	e := startEnv(t)
	ctx := t.Context()

	pvc := simplePod("pvc", v1.RestartPolicyAlways, "sleep 3600")
	pvc.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		NFS: &v1.NFSVolumeSource{Server: "nfs.invalid", Path: "/export"}}}}
	pvc.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	e.createPod(t, pvc)

	claims := simplePod("claims", v1.RestartPolicyAlways, "sleep 3600")
	tmpl := "gpu-template"
	claims.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	claims.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	e.createPod(t, claims)

	never := v1.ContainerRestartPolicyNever
	// A Restart rule is acted on: exit 42 restarts a container whose own
	// policy is Never, in a Never pod; it runs on the second try.
	rule := simplePod("restart-rule", v1.RestartPolicyNever, "if [ -f /data/once ]; then exec sleep 3600; fi; touch /data/once; exit 42")
	rule.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	rule.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	rule.Spec.Containers[0].RestartPolicy = &never
	rule.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	e.createPod(t, rule)

	t.Run("resourceClaims pod: refused without CDI, else waits for its claim", func(t *testing.T) {
		if e.cri.Version == agenttest.ContainerdVersion16 {
			// containerd 1.6 cannot inject CDI devices: the pod is refused.
			p := e.waitPod(t, "claims", 60*time.Second, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
			want := `Pod was rejected: Pod requires node features that are not available: DynamicResourceAllocation (resource claims "gpu": this node does not prepare dynamic resources)`
			if p.Status.Reason != "PodFeatureUnsupported" || p.Status.Message != want {
				t.Errorf("reason %q message %q, want PodFeatureUnsupported %q", p.Status.Reason, p.Status.Message, want)
			}
			return
		}
		// The agent prepares DRA claims (package dra): a claim from a
		// template the controller manager has not created (none runs
		// here) is a sync error, retried, as kubelet's.
		e.waitEvent(t, "claims", "FailedPrepareDynamicResources",
			`Failed to prepare dynamic resources: prepare dynamic resources: pod "default/claims": ResourceClaim not created yet`)
		p := e.waitPod(t, "claims", 10*time.Second, "Pending", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodPending })
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil ||
			p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("container statuses %+v, want waiting ContainerCreating", p.Status.ContainerStatuses)
		}
	})
	t.Run("Restart rule restarts a Never container on its exit code", func(t *testing.T) {
		p := e.waitPod(t, "restart-rule", 90*time.Second, "restarted once and running", func(p *v1.Pod) bool {
			cs := containerStatus(p, "app")
			return cs != nil && cs.RestartCount == 1 && cs.State.Running != nil
		})
		cs := containerStatus(p, "app")
		if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 42 {
			t.Errorf("last termination %+v, want exit code 42", cs.LastTerminationState)
		}
		if p.Status.Phase != v1.PodRunning {
			t.Errorf("phase %s, want Running", p.Status.Phase)
		}
	})
	t.Run("nfs pod waits in ContainerCreating with FailedMount", func(t *testing.T) {
		want := `Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: ` +
			`failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: nfs volumes are not supported by this node agent`
		first := failedMounts(t, e, "pvc", want, 60*time.Second)
		// Watch for 10 s from the first event: the retries back off
		// (1, 2, 4, 8 s...), so a handful of events, never a tight loop.
		time.Sleep(10 * time.Second)
		n := failedMountCount(t, e, "pvc", want)
		t.Logf("FailedMount events: %d by %v after the first was seen", n, 10*time.Second)
		if n < 2 || n > 8 {
			t.Errorf("%d FailedMount events in %v since %v, want 2..8 (retried with back-off)", n, 10*time.Second, first)
		}
		p, err := e.client.CoreV1().Pods("default").Get(ctx, "pvc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := containerStatus(p, "app")
		if p.Status.Phase != v1.PodPending || cs == nil || cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("status %s, want Pending with app waiting ContainerCreating", describeStatus(p))
		}
	})
}

// failedMounts waits for a FailedMount event of the pod with the message
// and returns when it was first seen.
func failedMounts(t *testing.T, e *env, pod, message string, timeout time.Duration) time.Time {
	t.Helper()
	var seen time.Time
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if failedMountCount(t, e, pod, message) > 0 {
			seen = time.Now()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		evs, _ := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		var got []string
		if evs != nil {
			for _, ev := range evs.Items {
				got = append(got, ev.Reason+": "+ev.Message)
			}
		}
		t.Fatalf("no FailedMount event %q within %v; events: %q", message, timeout, got)
	}
	return seen
}

// failedMountCount sums the counts of the pod's FailedMount events with the
// message (the recorder folds repeats into one event's count).
func failedMountCount(t *testing.T, e *env, pod, message string) int {
	t.Helper()
	evs, err := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return 0
	}
	n := 0
	for _, ev := range evs.Items {
		if ev.Reason == "FailedMount" && ev.Message == message {
			n += max(int(ev.Count), 1)
		}
	}
	return n
}
