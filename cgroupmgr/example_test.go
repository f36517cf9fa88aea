package cgroupmgr_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/cgroupmgr"
)

// What the Manager computes for a node with 4 CPUs and 8Gi, 1 CPU and 1Gi
// reserved, and a Burstable web pod: the kubepods limits, the pod's
// cgroup under each driver and its limits, and its container's
// oom_score_adj.
func Example() {
	q := resource.MustParse
	capacity := v1.ResourceList{v1.ResourceCPU: q("4"), v1.ResourceMemory: q("8Gi")}
	reserved := v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("1Gi")}
	eviction := v1.ResourceList{v1.ResourceMemory: q("100Mi")}
	a, err := cgroupmgr.NodeAllocatable(capacity, reserved, nil, eviction)
	if err != nil {
		fmt.Println(err)
		return
	}
	kubepodsMem, allocMem := a.Kubepods[v1.ResourceMemory], a.Allocatable[v1.ResourceMemory]
	fmt.Printf("kubepods memory limit %s, node allocatable memory %s\n", kubepodsMem.String(), allocMem.String())

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "8f1c-22"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "nginx", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("250m"), v1.ResourceMemory: q("512Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("1Gi")},
		}}}},
	}
	name, _ := cgroupmgr.NewCgroupName(cgroupmgr.CgroupName{"kubepods", "burstable"}, "pod"+string(pod.UID))
	fmt.Println("cgroupfs:", name.ToCgroupfs())
	fmt.Println("systemd: ", name.ToSystemd())

	rc := cgroupmgr.ResourceConfigForPod(pod, true, cgroupmgr.QuotaPeriod)
	fmt.Printf("cpu.shares %d, cpu.cfs_quota_us %d per %dus, memory limit %d\n", *rc.CPUShares, *rc.CPUQuota, *rc.CPUPeriod, *rc.Memory)
	fmt.Println("cpu.weight on cgroup v2:", cgroupmgr.CPUSharesToWeight(*rc.CPUShares))

	memCapacity := capacity[v1.ResourceMemory]
	fmt.Println("oom_score_adj:", cgroupmgr.OOMScoreAdj(pod, &pod.Spec.Containers[0], memCapacity.Value()))
	// Output:
	// kubepods memory limit 7Gi, node allocatable memory 7068Mi
	// cgroupfs: /kubepods/burstable/pod8f1c-22
	// systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f1c_22.slice
	// cpu.shares 256, cpu.cfs_quota_us 100000 per 100000us, memory limit 1073741824
	// cpu.weight on cgroup v2: 10
	// oom_score_adj: 938
}
