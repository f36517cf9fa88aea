package allocation_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/allocation"
)

func TestDecide(t *testing.T) {
	guaranteed := func(cpu, mem string) v1.ResourceRequirements {
		s := "cpu=" + cpu + ",memory=" + mem
		return reqs(s, s)
	}
	other := podOf("other", ctr("o", reqs("cpu=1500m,memory=1Gi", "")))
	cases := []struct {
		name      string
		allocated v1.ResourceRequirements
		desired   v1.ResourceRequirements
		podLevel  *v1.ResourceRequirements // desired
		allocLvl  *v1.ResourceRequirements // allocated
		node      allocation.NodeConfig
		fit       nodekit.Admitter
		others    []*v1.Pod
		want      *allocation.Pending
	}{
		{
			name:      "fits beside the others",
			allocated: reqs("cpu=100m", "cpu=100m"), desired: reqs("cpu=400m", "cpu=400m"),
			fit: fitOn("cpu=2,memory=4Gi"), others: []*v1.Pod{other},
		},
		{
			name:      "does not fit now: deferred with the fit's message",
			allocated: reqs("cpu=100m", "cpu=100m"), desired: reqs("cpu=1", "cpu=1"),
			fit: fitOn("cpu=2,memory=4Gi"), others: []*v1.Pod{other},
			want: &allocation.Pending{Reason: v1.PodReasonDeferred, Message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
		},
		{
			name:      "more than the node has: deferred, as kubelet v1.37",
			allocated: reqs("memory=1Gi", ""), desired: reqs("memory=8Gi", ""),
			fit: fitOn("cpu=2,memory=4Gi"), others: []*v1.Pod{other},
			want: &allocation.Pending{Reason: v1.PodReasonDeferred, Message: "Node didn't have enough resource: memory, requested: 8589934592, used: 1073741824, capacity: 4294967296"},
		},
		{
			name:      "guaranteed CPU under the static CPU manager",
			allocated: guaranteed("1", "1Gi"), desired: guaranteed("2", "1Gi"),
			node: allocation.NodeConfig{CPUManagerStatic: true}, fit: fitOn("cpu=4,memory=4Gi"),
			want: &allocation.Pending{Reason: v1.PodReasonInfeasible, Message: `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`, Detail: allocation.InfeasibleStaticCPU},
		},
		{
			name:      "guaranteed memory only under the static CPU manager fits",
			allocated: guaranteed("1", "1Gi"), desired: guaranteed("1", "2Gi"),
			node: allocation.NodeConfig{CPUManagerStatic: true}, fit: fitOn("cpu=4,memory=4Gi"),
		},
		{
			name:      "guaranteed memory under the static memory manager",
			allocated: guaranteed("1", "1Gi"), desired: guaranteed("1", "2Gi"),
			node: allocation.NodeConfig{MemoryManagerStatic: true}, fit: fitOn("cpu=4,memory=4Gi"),
			want: &allocation.Pending{Reason: v1.PodReasonInfeasible, Message: `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`, Detail: allocation.InfeasibleStaticMemory},
		},
		{
			name:      "burstable CPU under the static CPU manager fits",
			allocated: reqs("cpu=1", "cpu=2"), desired: reqs("cpu=2", "cpu=3"),
			node: allocation.NodeConfig{CPUManagerStatic: true}, fit: fitOn("cpu=4,memory=4Gi"),
		},
		{
			name:      "pod-level cpu and memory grow, fitting: allocated",
			allocated: reqs("cpu=100m", ""), desired: reqs("cpu=100m", ""),
			allocLvl: podLevel("cpu=200m,memory=64Mi", "cpu=200m,memory=64Mi"),
			podLevel: podLevel("cpu=400m,memory=128Mi", "cpu=400m,memory=128Mi"),
			fit:      fitOn("cpu=2,memory=4Gi"), others: []*v1.Pod{other},
		},
		{
			name:      "pod-level request does not fit now: deferred with the fit's message",
			allocated: reqs("", ""), desired: reqs("", ""),
			allocLvl: podLevel("cpu=100m", "cpu=100m"), podLevel: podLevel("cpu=1", "cpu=1"),
			fit: fitOn("cpu=2,memory=4Gi"), others: []*v1.Pod{other},
			want: &allocation.Pending{Reason: v1.PodReasonDeferred, Message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
		},
		{
			name:      "pod-level shrink: allocated",
			allocated: reqs("", ""), desired: reqs("", ""),
			allocLvl: podLevel("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"), podLevel: podLevel("cpu=500m,memory=512Mi", "cpu=500m,memory=512Mi"),
			fit: fitOn("cpu=2,memory=4Gi"), others: []*v1.Pod{other},
		},
		{
			name:      "guaranteed pod-level cpu under the static CPU manager: allocated, as upstream checks containers only",
			allocated: guaranteed("1", "1Gi"), desired: guaranteed("1", "1Gi"),
			allocLvl: podLevel("cpu=2,memory=2Gi", "cpu=2,memory=2Gi"), podLevel: podLevel("cpu=3,memory=2Gi", "cpu=3,memory=2Gi"),
			node: allocation.NodeConfig{CPUManagerStatic: true}, fit: fitOn("cpu=4,memory=4Gi"),
		},
		{
			name:      "pod-level hugepages change: infeasible",
			allocated: reqs("", ""), desired: reqs("", ""),
			allocLvl: podLevel("cpu=1,hugepages-2Mi=2Mi", "cpu=1,hugepages-2Mi=2Mi"), podLevel: podLevel("cpu=1,hugepages-2Mi=4Mi", "cpu=1,hugepages-2Mi=4Mi"),
			fit:  fitOn("cpu=4,memory=4Gi"),
			want: &allocation.Pending{Reason: v1.PodReasonInfeasible, Message: "only cpu and memory resources are mutable at pod-level", Detail: allocation.InfeasiblePodLevelOther},
		},
		{
			name:      "pod-level resources removed: infeasible",
			allocated: reqs("cpu=1", ""), desired: reqs("cpu=1", ""),
			allocLvl: podLevel("cpu=1", "cpu=2"),
			fit:      fitOn("cpu=4,memory=4Gi"),
			want:     &allocation.Pending{Reason: v1.PodReasonInfeasible, Message: "pod-level resources cannot be removed", Detail: allocation.InfeasiblePodLevelRemoved},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allocPod := podOf("p", ctr("c", tc.allocated))
			allocPod.Spec.Resources = tc.allocLvl
			allocated := allocation.ForPod(allocPod)
			desired := podOf("p", ctr("c", tc.desired))
			desired.Spec.Resources = tc.podLevel
			got := allocation.Decide(context.Background(), desired, allocated, tc.node, tc.fit, tc.others)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("Decide = %+v, want allocated", *got)
			case tc.want != nil && got == nil:
				t.Fatalf("Decide allocated, want %+v", *tc.want)
			case tc.want != nil && *got != *tc.want:
				t.Fatalf("Decide = %+v\nwant     %+v", *got, *tc.want)
			}
		})
	}
}

func TestWithResourcesLeavesPodAlone(t *testing.T) {
	pod := podOf("p", ctr("a", reqs("cpu=1", "cpu=1")), ctr("b", reqs("memory=1Gi", "")))
	alloc := allocation.ForPod(pod)
	if got, changed := allocation.WithResources(pod, alloc); changed || got != pod {
		t.Fatalf("same allocation: changed=%v, copy=%v; want the pod itself", changed, got != pod)
	}
	alloc.ContainerResources["a"] = reqs("cpu=500m", "cpu=500m")
	got, changed := allocation.WithResources(pod, alloc)
	if !changed {
		t.Fatal("WithResources reported no change")
	}
	if q := got.Spec.Containers[0].Resources.Limits.Cpu(); q.MilliValue() != 500 {
		t.Fatalf("allocated pod's cpu limit = %v, want 500m", q)
	}
	if q := pod.Spec.Containers[0].Resources.Limits.Cpu(); q.MilliValue() != 1000 {
		t.Fatalf("the spec was modified: cpu limit = %v", q)
	}
}
