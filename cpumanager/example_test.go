package cpumanager_test

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/cpumanager"
	"github.com/nodekit/nodekit/topology"
)

// A 2-socket, 16-core, SMT-2 machine with one CPU reserved: a Guaranteed
// pod asking for 4 CPUs gets two whole cores of its own; everyone else
// shares the rest.
func Example() {
	machine, _ := topology.Synthetic(topology.Layout{Sockets: 2, CoresPerSocket: 16, ThreadsPerCore: 2})
	dir, _ := os.MkdirTemp("", "cpumanager-example")
	defer os.RemoveAll(dir)

	var active []*v1.Pod
	cpus, err := cpumanager.New(context.Background(), cpumanager.Config{
		Policy:      cpumanager.PolicyStatic,
		Topology:    machine.CPU,
		ReservedCPU: resource.MustParse("1"),
		StateDir:    dir,
		ActivePods:  cpumanager.PodListerFunc(func() []*v1.Pod { return active }),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	four := resource.MustParse("4")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", UID: "uid-db"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "postgres", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: four, v1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: four, v1.ResourceMemory: resource.MustParse("1Gi")},
		}}}},
	}
	d := cpus.Admit(context.Background(), nodekit.AdmitRequest{Pod: pod})
	active = append(active, pod)
	exclusive, _ := cpus.CPUSet(pod.UID, "postgres")
	shared, _ := cpus.CPUSet("some-other-pod", "app")
	fmt.Println("admitted:", d.Admit)
	fmt.Println("reserved:", cpus.ReservedCPUs())
	fmt.Println("postgres:", exclusive)
	fmt.Println("shared:  ", shared)
	// Output:
	// admitted: true
	// reserved: 0
	// postgres: 1-2,33-34
	// shared:   0,3-32,35-63
}
