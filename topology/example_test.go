package topology_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/topology"
)

// gpus is a toy HintProvider: the device sits on NUMA node 1.
type gpus struct{ got string }

func (g *gpus) TopologyHints(_ context.Context, _ *v1.Pod, c *v1.Container) map[string][]topology.Hint {
	node1, _ := topology.NewNUMAMask(1)
	return map[string][]topology.Hint{"example.com/gpu": {{NUMANodes: node1, Preferred: true}}}
}

func (g *gpus) PodTopologyHints(context.Context, *v1.Pod) map[string][]topology.Hint { return nil }

func (g *gpus) Allocate(_ context.Context, _ *v1.Pod, c *v1.Container, affinity topology.Hint) error {
	g.got = fmt.Sprintf("%s on NUMA node %s", c.Name, affinity.NUMANodes)
	return nil
}

// A 2-socket machine described in one line, and a single-numa-node
// topology manager aligning a (toy) device provider.
func Example() {
	machine, _ := topology.Synthetic(topology.Layout{Sockets: 2, CoresPerSocket: 16, ThreadsPerCore: 2, MemoryPerNUMANode: 64 << 30})
	fmt.Println(machine.CPU)
	fmt.Println("NUMA node 1:", machine.NUMANodes[1].CPUs)

	dev := &gpus{}
	tm, err := topology.NewManager(topology.Config{Policy: topology.PolicySingleNUMANode, Machine: machine}, dev)
	if err != nil {
		fmt.Println(err)
		return
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", UID: "u1"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "trainer"}}}}
	d := tm.Admit(context.Background(), nodekit.AdmitRequest{Pod: pod})
	fmt.Println("admitted:", d.Admit, "-", dev.got)
	// Output:
	// 64 CPUs, 32 cores, 2 sockets, 2 NUMA nodes
	// NUMA node 1: 16-31,48-63
	// admitted: true - trainer on NUMA node 1
}
