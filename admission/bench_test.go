package admission_test

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

// BenchmarkChain110Pods admits one pod through the built-in chain on a node
// already running 110 pods (kubelet's default maxPods), each with two
// containers, every tenth with a host port, every fifth with a sidecar. The
// pod passes every check, so every admitter does its full work.
//
// status=spec: the admitted pods' status carries no resources, so their
// requests come from the spec alone. status=allocated: every container
// status carries allocatedResources and resources, as kubelet v1.37 reports
// them, so requests are max(spec, allocated, actuated).
func BenchmarkChain110Pods(b *testing.B) {
	b.Run("status=spec", func(b *testing.B) { benchmarkChain(b, false) })
	b.Run("status=allocated", func(b *testing.B) { benchmarkChain(b, true) })
}

func benchmarkChain(b *testing.B, withStatus bool) {
	var running []*v1.Pod
	for i := range 110 {
		p := pod(fmt.Sprintf("p%d", i), "", withContainers(
			container("app", "cpu=100m,memory=128Mi"),
			container("log", "cpu=10m,memory=16Mi,ephemeral-storage=1Gi"),
		), withPhase(v1.PodRunning))
		if i%10 == 0 {
			withPort("", "", int32(8000+i))(p)
		}
		if i%5 == 0 {
			withInit(sidecar("proxy", "cpu=50m,memory=64Mi"))(p)
		}
		if withStatus {
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				rr := c.Resources.Requests
				p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{
					Name: c.Name, AllocatedResources: rr.DeepCopy(),
					Resources: &v1.ResourceRequirements{Requests: rr.DeepCopy()},
				})
			}
		}
		running = append(running, p)
	}
	node := admissiontest.Node{
		Allocatable: res("cpu=64,memory=256Gi,ephemeral-storage=500Gi,pods=250,example.com/gpu=4"),
		Labels:      map[string]string{"zone": "a"},
		Taints:      []v1.Taint{{Key: "dedicated", Value: "batch", Effect: v1.TaintEffectNoExecute}},
	}.Object()
	chain := admission.NewChain(admission.Builtins(admission.NodeFunc(func(context.Context) (*v1.Node, error) { return node, nil }))...)
	p := pod("new", "cpu=500m,memory=1Gi,example.com/gpu=1",
		withNodeSelector("zone", "a"),
		withTolerations(v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "batch", Effect: v1.TaintEffectNoExecute}),
		withPort("", "", 9000),
	)
	req := nodekit.AdmitRequest{Pod: p, Pods: running}
	ctx := context.Background()
	if d := chain.Admit(ctx, req); !d.Admit {
		b.Fatalf("setup: pod rejected: %+v", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := chain.Admit(ctx, req); !d.Admit {
			b.Fatal(d)
		}
	}
}
