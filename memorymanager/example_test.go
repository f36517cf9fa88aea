package memorymanager_test

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/memorymanager"
	"github.com/nodekit/nodekit/topology"
)

// Two NUMA nodes of 64 GiB with 1 GiB reserved on node 0: a Guaranteed
// pod's 8 GiB fit on one node, so its memory comes from node 0 only.
func Example() {
	machine, _ := topology.Synthetic(topology.Layout{Sockets: 2, CoresPerSocket: 8, ThreadsPerCore: 2, MemoryPerNUMANode: 64 << 30})
	dir, _ := os.MkdirTemp("", "memorymanager-example")
	defer os.RemoveAll(dir)

	var active []*v1.Pod
	mem, err := memorymanager.New(context.Background(), memorymanager.Config{
		Policy:  memorymanager.PolicyStatic,
		Machine: machine,
		ReservedMemory: []kubeletconfig.MemoryReservation{
			{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}},
		},
		StateDir:   dir,
		ActivePods: memorymanager.PodListerFunc(func() []*v1.Pod { return active }),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("8Gi")}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "default", UID: "uid-cache"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "redis", Resources: v1.ResourceRequirements{Requests: res, Limits: res}}}},
	}
	d := mem.Admit(context.Background(), nodekit.AdmitRequest{Pod: pod})
	mems, _ := mem.CPUSetMems(pod.UID, "redis")
	fmt.Println("admitted:", d.Admit)
	fmt.Println("cpuset.mems:", mems)
	fmt.Println("node 0 free GiB:", mem.Free(0, v1.ResourceMemory)>>30)
	// Output:
	// admitted: true
	// cpuset.mems: 0
	// node 0 free GiB: 55
}
