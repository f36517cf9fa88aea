package podresources_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/podresources"
)

type pods []*v1.Pod

func (p pods) ActivePods() []*v1.Pod { return p }

// cpus gives container "app" CPUs 2-3 of the machine's 0-3.
type cpus struct{}

func (cpus) ContainerCPUs(_ types.UID, name string) []int64 {
	if name == "app" {
		return podresources.CPUIDs(cpuset.New(2, 3))
	}
	return nil
}

func (cpus) AllocatableCPUs() []int64 { return podresources.CPUIDs(cpuset.New(0, 1, 2, 3)) }

func Example() {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	s, err := podresources.New(podresources.Config{Pods: pods{pod}, CPUs: cpus{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	list, _ := s.List(ctx, nil)
	for _, p := range list.PodResources {
		for _, c := range p.Containers {
			fmt.Println(p.Namespace, p.Name, c.Name, c.CpuIds)
		}
	}
	alloc, _ := s.GetAllocatableResources(ctx, nil)
	fmt.Println("allocatable", alloc.CpuIds)
	// Output:
	// default web app [2 3]
	// allocatable [0 1 2 3]
}
