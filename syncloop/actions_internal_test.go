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
