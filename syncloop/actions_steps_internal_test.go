package syncloop

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

func restartPolicy(p v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &p }

func podWithPolicy(p v1.RestartPolicy) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"}, Spec: v1.PodSpec{RestartPolicy: p}}
}

// A container's own restartPolicy decides over the pod's; only Never
// keeps a failed container down.
func TestContainerRestarts(t *testing.T) {
	for _, tc := range []struct {
		pod  v1.RestartPolicy
		own  *v1.ContainerRestartPolicy
		want bool
	}{
		{pod: v1.RestartPolicyAlways, want: true},
		{pod: v1.RestartPolicyOnFailure, want: true},
		{pod: v1.RestartPolicyNever, want: false},
		{pod: v1.RestartPolicyNever, own: restartPolicy(v1.ContainerRestartPolicyOnFailure), want: true},
		{pod: v1.RestartPolicyNever, own: restartPolicy(v1.ContainerRestartPolicyAlways), want: true},
		{pod: v1.RestartPolicyAlways, own: restartPolicy(v1.ContainerRestartPolicyNever), want: false},
	} {
		c := &v1.Container{Name: "app", RestartPolicy: tc.own}
		if got := containerRestarts(podWithPolicy(tc.pod), c); got != tc.want {
			t.Errorf("pod %s, container %v: restarts %v, want %v", tc.pod, tc.own, got, tc.want)
		}
	}
}

// A running sidecar waits on its startup probe until it has a success or
// a failure; without a startup probe it counts as started.
func TestSidecarStartup(t *testing.T) {
	cs := &nodekit.ContainerStatus{ID: nodekit.ContainerID{Type: "fake", ID: "1"}, Name: "sidecar", State: nodekit.StateRunning}
	for _, tc := range []struct {
		name     string
		hasProbe bool
		probes   ProbeResults
		want     startupState
	}{
		{name: "no probe", probes: probeMap{Startup: ProbeFailure}, want: startupDone},
		{name: "no prober", hasProbe: true, probes: nil, want: startupPending},
		{name: "no result", hasProbe: true, probes: probeMap{}, want: startupPending},
		{name: "unknown", hasProbe: true, probes: probeMap{Startup: ProbeUnknown}, want: startupPending},
		{name: "success", hasProbe: true, probes: probeMap{Startup: ProbeSuccess}, want: startupDone},
		{name: "failure", hasProbe: true, probes: probeMap{Startup: ProbeFailure}, want: startupFailed},
		{name: "liveness only fails", hasProbe: true, probes: probeMap{Liveness: ProbeFailure, Startup: ProbeSuccess}, want: startupDone},
	} {
		c := &v1.Container{Name: "sidecar", RestartPolicy: restartPolicy(v1.ContainerRestartPolicyAlways)}
		if tc.hasProbe {
			c.StartupProbe = &v1.Probe{}
		}
		if got := sidecarStartup(c, cs, tc.probes); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A running regular container is killed for a changed spec (and always
// restarted), else for a failed liveness probe, else a failed startup
// probe (restarted per its policy, with the probe's grace period).
func TestKillRunning(t *testing.T) {
	five := int64(5)
	id := nodekit.ContainerID{Type: "fake", ID: "1"}
	fixed := func(h uint64) func(*v1.Container) uint64 { return func(*v1.Container) uint64 { return h } }
	for _, tc := range []struct {
		name        string
		policy      v1.RestartPolicy
		csHash      uint64
		hash        func(*v1.Container) uint64
		probes      ProbeResults
		wantKill    bool
		wantRestart bool
		wantMsg     string
		wantReason  string
		wantGrace   time.Duration // 0: none
	}{
		{name: "healthy", policy: v1.RestartPolicyAlways, csHash: 7, hash: fixed(7), probes: probeMap{Liveness: ProbeSuccess}},
		{name: "no hash known", policy: v1.RestartPolicyAlways, csHash: 0, hash: fixed(7)},
		{name: "no hasher", policy: v1.RestartPolicyAlways, csHash: 7},
		{name: "changed under Never", policy: v1.RestartPolicyNever, csHash: 7, hash: fixed(8), probes: probeMap{Liveness: ProbeFailure},
			wantKill: true, wantRestart: true, wantMsg: "Container app definition changed, will be restarted"},
		{name: "liveness", policy: v1.RestartPolicyAlways, probes: probeMap{Liveness: ProbeFailure, Startup: ProbeFailure},
			wantKill: true, wantRestart: true, wantMsg: "Container app failed liveness probe, will be restarted",
			wantReason: reasonLivenessProbe, wantGrace: 5 * time.Second},
		{name: "liveness under Never", policy: v1.RestartPolicyNever, probes: probeMap{Liveness: ProbeFailure},
			wantKill: true, wantMsg: "Container app failed liveness probe", wantReason: reasonLivenessProbe, wantGrace: 5 * time.Second},
		{name: "startup", policy: v1.RestartPolicyOnFailure, probes: probeMap{Liveness: ProbeUnknown, Startup: ProbeFailure},
			wantKill: true, wantRestart: true, wantMsg: "Container app failed startup probe, will be restarted",
			wantReason: reasonStartupProbe},
	} {
		pod := podWithPolicy(tc.policy)
		c := &v1.Container{Name: "app", LivenessProbe: &v1.Probe{TerminationGracePeriodSeconds: &five}, StartupProbe: &v1.Probe{}}
		cs := &nodekit.ContainerStatus{ID: id, Name: "app", State: nodekit.StateRunning, Hash: tc.csHash}
		kill, restart, condemned := killRunning(pod, c, cs, tc.probes, tc.hash)
		if condemned != tc.wantKill || restart != tc.wantRestart {
			t.Errorf("%s: killed %v restarted %v, want %v %v", tc.name, condemned, restart, tc.wantKill, tc.wantRestart)
			continue
		}
		if !condemned {
			continue
		}
		if kill.Name != "app" || kill.Container != c || kill.Message != tc.wantMsg || kill.Reason != tc.wantReason {
			t.Errorf("%s: kill %+v, want message %q reason %q", tc.name, kill, tc.wantMsg, tc.wantReason)
		}
		switch {
		case tc.wantGrace == 0 && kill.GracePeriod != nil:
			t.Errorf("%s: grace %v, want none", tc.name, *kill.GracePeriod)
		case tc.wantGrace != 0 && (kill.GracePeriod == nil || *kill.GracePeriod != tc.wantGrace):
			t.Errorf("%s: grace %v, want %v", tc.name, kill.GracePeriod, tc.wantGrace)
		}
	}
}

// A new sandbox runs every regular container again except those that
// exited 0 and do not restart after success.
func TestRegularToRerun(t *testing.T) {
	exited := func(name string, code int) *nodekit.ContainerStatus {
		return &nodekit.ContainerStatus{Name: name, State: nodekit.StateExited, ExitCode: code}
	}
	for _, tc := range []struct {
		name   string
		policy v1.RestartPolicy
		own    *v1.ContainerRestartPolicy // of container "b"
		status []*nodekit.ContainerStatus
		want   []int
	}{
		{name: "no status", policy: v1.RestartPolicyNever, want: []int{0, 1}},
		{name: "Always reruns successes", policy: v1.RestartPolicyAlways, status: []*nodekit.ContainerStatus{exited("a", 0), exited("b", 0)}, want: []int{0, 1}},
		{name: "OnFailure keeps successes", policy: v1.RestartPolicyOnFailure, status: []*nodekit.ContainerStatus{exited("a", 0), exited("b", 1)}, want: []int{1}},
		{name: "all done", policy: v1.RestartPolicyNever, status: []*nodekit.ContainerStatus{exited("a", 0), exited("b", 0)}, want: nil},
		{name: "own Always overrides", policy: v1.RestartPolicyNever, own: restartPolicy(v1.ContainerRestartPolicyAlways),
			status: []*nodekit.ContainerStatus{exited("a", 0), exited("b", 0)}, want: []int{1}},
		{name: "running is rerun", policy: v1.RestartPolicyNever,
			status: []*nodekit.ContainerStatus{{Name: "a", State: nodekit.StateRunning}, exited("b", 0)}, want: []int{0}},
	} {
		pod := podWithPolicy(tc.policy)
		pod.Spec.Containers = []v1.Container{{Name: "a"}, {Name: "b", RestartPolicy: tc.own}}
		st := &nodekit.PodStatus{ID: "u", Containers: tc.status}
		if got := regularToRerun(pod, st); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// An ephemeral container starts only if the runtime never had it.
func TestEphemeralToStart(t *testing.T) {
	pod := podWithPolicy(v1.RestartPolicyAlways)
	for _, n := range []string{"debug-1", "debug-2", "debug-3"} {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers,
			v1.EphemeralContainer{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: n}})
	}
	if got := ephemeralToStart(pod, nil); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("no status: %v, want [0 1 2]", got)
	}
	st := &nodekit.PodStatus{ID: "u", Containers: []*nodekit.ContainerStatus{
		{Name: "debug-1", State: nodekit.StateExited, ExitCode: 1},
		{Name: "debug-3", State: nodekit.StateRunning},
	}}
	if got := ephemeralToStart(pod, st); !slices.Equal(got, []int{1}) {
		t.Errorf("two known: %v, want [1]", got)
	}
}
