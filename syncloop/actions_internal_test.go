package syncloop

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

type probeMap map[ProbeKind]ProbeResult

func (p probeMap) Result(k ProbeKind, _ nodekit.ContainerID) (ProbeResult, bool) {
	r, ok := p[k]
	return r, ok
}

// A sidecar failing its liveness or startup probe is killed with the
// probe's terminationGracePeriodSeconds, not the pod's, as upstream.
func TestSidecarProbeKillUsesProbeGrace(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	podGrace, probeGraceSecs := int64(500), int64(5)
	for _, kind := range []ProbeKind{Liveness, Startup} {
		probe := &v1.Probe{TerminationGracePeriodSeconds: &probeGraceSecs}
		sidecar := v1.Container{Name: "sidecar", Image: "busybox", RestartPolicy: &always}
		if kind == Liveness {
			sidecar.LivenessProbe = probe
		} else {
			sidecar.StartupProbe = probe
		}
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
			Spec: v1.PodSpec{TerminationGracePeriodSeconds: &podGrace, RestartPolicy: v1.RestartPolicyAlways,
				InitContainers: []v1.Container{sidecar}, Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
		}
		id := nodekit.ContainerID{Type: "fake", ID: "1"}
		st := &nodekit.PodStatus{ID: "u", Sandboxes: []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}}, Containers: []*nodekit.ContainerStatus{
			{ID: id, Name: "sidecar", State: nodekit.StateRunning},
			{ID: nodekit.ContainerID{Type: "fake", ID: "2"}, Name: "app", State: nodekit.StateRunning},
		}}
		a := computeActions(pod, st, probeMap{kind: ProbeFailure}, nil)
		k, ok := a.ContainersToKill[id]
		if !ok {
			t.Fatalf("%s failure: sidecar not killed: %+v", kind, a)
		}
		if k.GracePeriod == nil || *k.GracePeriod != 5*time.Second {
			t.Fatalf("%s failure: grace %v, want the probe's 5s", kind, k.GracePeriod)
		}
	}
}

// nameImageHash stands for the runtime's container hash, which covers a
// container's name and image only, as upstream kubelet v1.37's.
func nameImageHash(c *v1.Container) uint64 {
	var h uint64 = 14695981039346656037
	for _, b := range []byte(c.Name + "\x00" + c.Image) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return h
}

// Containers another agent made (kubelet, before a takeover) are adopted
// when their hash matches the spec: no kill, no start, whatever their
// restart counts and exited init containers; a new image still restarts
// the container, as upstream.
func TestComputeActionsAdoptsMatchingContainers(t *testing.T) {
	initC := v1.Container{Name: "init", Image: "busybox", Command: []string{"true"}}
	app := v1.Container{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"}}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, InitContainers: []v1.Container{initC}, Containers: []v1.Container{app}},
	}
	sandbox := []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}}
	appID := nodekit.ContainerID{Type: "containerd", ID: "app-2"}
	status := func(appHash uint64) *nodekit.PodStatus {
		return &nodekit.PodStatus{ID: "u", Sandboxes: sandbox, Containers: []*nodekit.ContainerStatus{
			// Newest first: the running app (its third start), its dead
			// earlier attempt, the init container that finished.
			{ID: appID, Name: "app", State: nodekit.StateRunning, Hash: appHash, RestartCount: 2},
			{ID: nodekit.ContainerID{Type: "containerd", ID: "app-1"}, Name: "app", State: nodekit.StateExited, ExitCode: 1, Hash: appHash, RestartCount: 1},
			{ID: nodekit.ContainerID{Type: "containerd", ID: "init-0"}, Name: "init", State: nodekit.StateExited, Hash: nameImageHash(&initC)},
		}}
	}

	a := computeActions(pod, status(nameImageHash(&app)), nil, nameImageHash)
	if a.KillPod || a.CreateSandbox || len(a.ContainersToKill) > 0 || len(a.ContainersToStart) > 0 || len(a.InitContainersToStart) > 0 {
		t.Errorf("matching containers: actions %+v, want none", a)
	}

	// The same pod spec with a new image (an update of the pod) replaces it.
	updated := pod.DeepCopy()
	updated.Spec.Containers[0].Image = "busybox:2"
	a = computeActions(updated, status(nameImageHash(&app)), nil, nameImageHash)
	if k, ok := a.ContainersToKill[appID]; !ok || k.Message != "Container app definition changed, will be restarted" {
		t.Errorf("new image: kills %+v, want app killed as changed", a.ContainersToKill)
	}
	if len(a.ContainersToStart) != 1 || a.ContainersToStart[0] != 0 || a.KillPod {
		t.Errorf("new image: starts %v (kill pod %v), want [0]", a.ContainersToStart, a.KillPod)
	}
}
