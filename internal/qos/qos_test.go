package qos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestClass(t *testing.T) {
	rl := func(cpu, mem string) v1.ResourceList {
		l := v1.ResourceList{}
		if cpu != "" {
			l[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[v1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	pod := func(rs ...v1.ResourceRequirements) *v1.Pod {
		p := &v1.Pod{}
		for _, r := range rs {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Resources: r})
		}
		return p
	}
	cases := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"nothing", pod(v1.ResourceRequirements{}), v1.PodQOSBestEffort},
		{"equal requests and limits", pod(v1.ResourceRequirements{Requests: rl("1", "1Gi"), Limits: rl("1", "1Gi")}), v1.PodQOSGuaranteed},
		// The API server defaults requests to limits; undefaulted, as upstream:
		{"limits only, undefaulted", pod(v1.ResourceRequirements{Limits: rl("1", "1Gi")}), v1.PodQOSBurstable},
		{"cpu limit only", pod(v1.ResourceRequirements{Limits: rl("1", "")}), v1.PodQOSBurstable},
		{"requests below limits", pod(v1.ResourceRequirements{Requests: rl("500m", "1Gi"), Limits: rl("1", "1Gi")}), v1.PodQOSBurstable},
		{"one container without limits", pod(v1.ResourceRequirements{Limits: rl("1", "1Gi")}, v1.ResourceRequirements{}), v1.PodQOSBurstable},
		{"requests only", pod(v1.ResourceRequirements{Requests: rl("100m", "")}), v1.PodQOSBurstable},
		{"set by the API server", &v1.Pod{Status: v1.PodStatus{QOSClass: v1.PodQOSBurstable}}, v1.PodQOSBurstable},
		{"pod-level resources", &v1.Pod{Spec: v1.PodSpec{Resources: &v1.ResourceRequirements{Requests: rl("1", "1Gi"), Limits: rl("1", "1Gi")},
			Containers: []v1.Container{{}}}}, v1.PodQOSGuaranteed},
	}
	for _, tc := range cases {
		if got := Class(tc.pod); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
