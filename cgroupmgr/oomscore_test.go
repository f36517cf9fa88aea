package cgroupmgr

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestOOMScoreAdj(t *testing.T) {
	const capacity = 10 * gi
	mem := func(q string) v1.ResourceRequirements { return res(rl("memory", q), nil) }
	guaranteed := res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))

	critical := func(p *v1.Pod, annotations map[string]string, priority *int32) *v1.Pod {
		p.Annotations = annotations
		p.Spec.PriorityClassName = "system-node-critical"
		p.Spec.Priority = priority
		return p
	}
	high := int32(2000001000)
	low := int32(1000)
	sidecar := withInit(podWith("sc", mem("2Gi"), mem("4Gi")), true, mem("1Gi"))
	bigSidecar := withInit(podWith("sc2", mem("2Gi"), mem("4Gi")), true, mem("4Gi"))
	plainInit := withInit(podWith("pi", mem("2Gi")), false, mem("1Gi"))
	podLevel := podWith("pl", mem("1Gi"), v1.ResourceRequirements{})
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: rl("memory", "4Gi")}

	cases := []struct {
		name      string
		pod       *v1.Pod
		container *v1.Container
		capacity  int64
		want      int
	}{
		{"guaranteed", podWith("g", guaranteed), nil, capacity, -997},
		{"best effort", podWith("be", v1.ResourceRequirements{}), nil, capacity, 1000},
		{"burstable 10%", podWith("b", mem("1Gi")), nil, capacity, 900},
		{"burstable, no memory request", podWith("b0", res(rl("cpu", "100m"), nil)), nil, capacity, 999},
		{"burstable, all memory", podWith("ball", mem("10Gi")), nil, capacity, 3},
		{"burstable, more than all memory", podWith("bmore", mem("20Gi")), nil, capacity, 3},
		{"burstable, tiny request", podWith("btiny", mem("1Mi")), nil, capacity, 999},
		{"burstable, unknown capacity", podWith("bcap", mem("1Gi")), nil, 0, 999},
		{"static node-critical best effort", critical(podWith("c1", v1.ResourceRequirements{}), map[string]string{"kubernetes.io/config.source": "file"}, nil), nil, capacity, -997},
		{"mirror node-critical", critical(podWith("c2", mem("1Gi")), map[string]string{"kubernetes.io/config.mirror": "x"}, nil), nil, capacity, -997},
		{"node-critical by priority", critical(podWith("c3", mem("1Gi")), nil, &high), nil, capacity, -997},
		{"node-critical class without critical priority", critical(podWith("c4", mem("1Gi")), map[string]string{"kubernetes.io/config.source": "api"}, &low), nil, capacity, 900},
		{"sidecar scores as the smallest app container", sidecar, &sidecar.Spec.InitContainers[0], capacity, 800},
		{"app container next to a sidecar", sidecar, &sidecar.Spec.Containers[1], capacity, 600},
		{"sidecar with a bigger request keeps its own", bigSidecar, &bigSidecar.Spec.InitContainers[0], capacity, 600},
		{"plain init container", plainInit, &plainInit.Spec.InitContainers[0], capacity, 900},
		{"pod-level request shared", podLevel, &podLevel.Spec.Containers[0], capacity, 750},
		{"pod-level request shared, no container request", podLevel, &podLevel.Spec.Containers[1], capacity, 850},
	}
	for _, tc := range cases {
		c := tc.container
		if c == nil {
			c = &tc.pod.Spec.Containers[0]
		}
		if got := OOMScoreAdj(tc.pod, c, tc.capacity); got != tc.want {
			t.Errorf("%s: OOMScoreAdj = %d, want %d", tc.name, got, tc.want)
		}
	}
}
