package admission_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
)

func Example() {
	ctx := context.Background()
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: map[string]string{"site": "store-42"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("1"),
			v1.ResourceMemory: resource.MustParse("2Gi"),
			v1.ResourcePods:   resource.MustParse("110"),
		}},
	}
	chain := admission.NewChain(admission.Builtins(admission.NodeFunc(func(context.Context) (*v1.Node, error) {
		return node, nil
	}))...)
	// A custom policy is one line of logic.
	chain.Add(nodekit.AdmitFunc(func(_ context.Context, r nodekit.AdmitRequest) nodekit.Decision {
		if r.Pod.Labels["team"] == "" {
			return nodekit.Decision{Reason: "NoTeam", Message: "pods on this node need a team label"}
		}
		return nodekit.Admitted
	}))

	newPod := func(name, cpu string, labels map[string]string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels},
			Spec: v1.PodSpec{Containers: []v1.Container{{
				Name:      "app",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
			}}},
		}
	}
	team := map[string]string{"team": "pos"}
	running := []*v1.Pod{newPod("pos", "100m", team)}

	for _, p := range []*v1.Pod{
		newPod("big", "2", team),
		newPod("stray", "100m", nil),
		newPod("cache", "500m", team),
	} {
		d := chain.Admit(ctx, nodekit.AdmitRequest{Pod: p, Pods: running})
		if d.Admit {
			fmt.Printf("%s: admitted\n", p.Name)
			running = append(running, p)
			continue
		}
		fmt.Printf("%s: %s: %s\n", p.Name, d.Reason, d.Message)
	}
	// Output:
	// big: OutOfcpu: Node didn't have enough resource: cpu, requested: 2000, used: 100, capacity: 1000
	// stray: NoTeam: pods on this node need a team label
	// cache: admitted
}
