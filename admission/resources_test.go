package admission_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

func TestResourceFit(t *testing.T) {
	node := func(alloc string, pods ...*v1.Pod) admissiontest.Node {
		return admissiontest.Node{Allocatable: res(alloc), Pods: pods}
	}
	cases := []decisionCase{
		{
			name: "fits",
			node: node("cpu=1,memory=1Gi", pod("a", "cpu=400m,memory=512Mi")),
			pod:  pod("new", "cpu=600m,memory=512Mi"),
			want: nodekit.Admitted,
		},
		{
			name: "cpu short",
			node: node("cpu=1", pod("a", "cpu=100m")),
			pod:  pod("new", "cpu=2"),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 100, capacity: 1000"),
		},
		{
			name: "memory short",
			node: node("cpu=1,memory=1Gi", pod("a", "memory=512Mi")),
			pod:  pod("new", "memory=600Mi"),
			want: reject("OutOfmemory", "Node didn't have enough resource: memory, requested: 629145600, used: 536870912, capacity: 1073741824"),
		},
		{
			name: "ephemeral-storage short",
			node: node("ephemeral-storage=10Gi", pod("a", "ephemeral-storage=8Gi")),
			pod:  pod("new", "ephemeral-storage=4Gi"),
			want: reject("OutOfephemeral-storage", "Node didn't have enough resource: ephemeral-storage, requested: 4294967296, used: 8589934592, capacity: 10737418240"),
		},
		{
			name: "extended resource short",
			node: node("cpu=4,example.com/gpu=2", pod("a", "example.com/gpu=1")),
			pod:  pod("new", "example.com/gpu=2"),
			want: reject("OutOfexample.com/gpu", "Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2"),
		},
		{
			name: "extended resource unknown to the node is ignored",
			node: node("cpu=4"),
			pod:  pod("new", "cpu=1,example.com/fpga=3"),
			want: nodekit.Admitted,
		},
		{
			name: "extended resource listed as zero still counts",
			node: node("cpu=4,example.com/fpga=0"),
			pod:  pod("new", "example.com/fpga=1"),
			want: reject("OutOfexample.com/fpga", "Node didn't have enough resource: example.com/fpga, requested: 1, used: 0, capacity: 0"),
		},
		{
			name: "DRA-backed extended resource is left to DRA, then refused",
			node: node("example.com/gpu=1", pod("a", "example.com/gpu=1")),
			pod: pod("new", "example.com/gpu=1", func(p *v1.Pod) {
				p.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
					RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: "example.com/gpu", RequestName: "r0"}},
					ResourceClaimName: "new-claim",
				}
			}),
			// Resource fit does not count it (no OutOfexample.com/gpu);
			// PodFeatures then refuses it, as nodekit has no DRA.
			want: reject("PodFeatureUnsupported", `Pod requires node features that are not available: DynamicResourceAllocation (resource claims "new-claim": this node does not prepare dynamic resources)`),
		},
		{
			name: "hugepages short",
			node: node("memory=8Gi,hugepages-2Mi=4Mi"),
			pod:  pod("new", "memory=1Gi,hugepages-2Mi=8Mi"),
			want: reject("OutOfhugepages-2Mi", "Node didn't have enough resource: hugepages-2Mi, requested: 8388608, used: 0, capacity: 4194304"),
		},
		{
			name: "hugepages missing on the node are not ignored",
			node: node("memory=8Gi"),
			pod:  pod("new", "hugepages-1Gi=1Gi"),
			want: reject("OutOfhugepages-1Gi", "Node didn't have enough resource: hugepages-1Gi, requested: 1073741824, used: 0, capacity: 0"),
		},
		{
			name: "two extended resources short: first by name",
			node: node("b.example.com/y=1,a.example.com/x=1"),
			pod:  pod("new", "b.example.com/y=2,a.example.com/x=2"),
			want: reject("OutOfa.example.com/x", "Node didn't have enough resource: a.example.com/x, requested: 2, used: 0, capacity: 1"),
		},
		{
			name: "pods full",
			node: node("cpu=4,pods=2", pod("a", ""), pod("b", "")),
			pod:  pod("new", ""),
			want: reject("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"),
		},
		{
			name: "pods checked before cpu",
			node: node("cpu=1,pods=1", pod("a", "cpu=1")),
			pod:  pod("new", "cpu=1"),
			want: reject("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"),
		},
		{
			name: "cpu checked before memory",
			node: node("cpu=1,memory=1Gi"),
			pod:  pod("new", "cpu=2,memory=2Gi"),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"),
		},
		{
			name: "terminal pods hold nothing",
			node: node("cpu=1,pods=2",
				pod("done", "cpu=1", withPhase(v1.PodSucceeded)),
				pod("failed", "cpu=1", withPhase(v1.PodFailed)),
				pod("running", "cpu=200m", withPhase(v1.PodRunning))),
			pod:  pod("new", "cpu=800m"),
			want: nodekit.Admitted,
		},
		{
			name: "the pod itself in Pods is not counted",
			node: node("cpu=1,pods=1", pod("new", "cpu=1")),
			pod:  pod("new", "cpu=1"),
			want: nodekit.Admitted,
		},
		{
			name: "best-effort pod fits an overcommitted node",
			node: node("cpu=1,memory=1Gi", pod("a", "cpu=2,memory=2Gi")),
			pod:  pod("new", ""),
			want: nodekit.Admitted,
		},
		{
			name: "pod without cpu request ignores cpu shortage",
			node: node("cpu=1,memory=1Gi", pod("a", "cpu=2")),
			pod:  pod("new", "memory=100Mi"),
			want: nodekit.Admitted,
		},
		{
			name: "init containers take the max, not the sum",
			node: node("cpu=1"),
			pod:  pod("new", "cpu=500m", withInit(container("i1", "cpu=1"), container("i2", "cpu=1"))),
			want: nodekit.Admitted,
		},
		{
			name: "init container larger than the node",
			node: node("cpu=1"),
			pod:  pod("new", "cpu=100m", withInit(container("i1", "cpu=1500m"))),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 0, capacity: 1000"),
		},
		{
			name: "sidecars add to regular containers",
			node: node("cpu=1"),
			pod:  pod("new", "cpu=500m", withInit(sidecar("proxy", "cpu=600m"))),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1100, used: 0, capacity: 1000"),
		},
		{
			name: "init container after a sidecar runs beside it",
			node: node("cpu=1"),
			pod:  pod("new", "cpu=100m", withInit(sidecar("proxy", "cpu=300m"), container("migrate", "cpu=800m"))),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1100, used: 0, capacity: 1000"),
		},
		{
			name: "init container before a sidecar runs alone",
			node: node("cpu=1"),
			pod:  pod("new", "cpu=100m", withInit(container("migrate", "cpu=800m"), sidecar("proxy", "cpu=300m"))),
			want: nodekit.Admitted,
		},
		{
			name: "regular containers add up",
			node: node("memory=1Gi"),
			pod:  pod("new", "", withContainers(container("a", "memory=600Mi"), container("b", "memory=600Mi"))),
			want: reject("OutOfmemory", "Node didn't have enough resource: memory, requested: 1258291200, used: 0, capacity: 1073741824"),
		},
		{
			name: "pod overhead counts",
			node: node("cpu=1"),
			pod:  pod("new", "cpu=800m", func(p *v1.Pod) { p.Spec.Overhead = res("cpu=250m") }),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1050, used: 0, capacity: 1000"),
		},
		{
			name: "overhead of admitted pods counts",
			node: node("cpu=1", pod("kata", "cpu=500m", func(p *v1.Pod) { p.Spec.Overhead = res("cpu=250m") })),
			pod:  pod("new", "cpu=500m"),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 500, used: 750, capacity: 1000"),
		},
		{
			name: "pod-level requests win over containers",
			node: node("cpu=1"),
			pod: pod("new", "cpu=100m", func(p *v1.Pod) {
				p.Spec.Resources = &v1.ResourceRequirements{Requests: res("cpu=2")}
			}),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"),
		},
		{
			name: "admitted pod being resized counts its allocation",
			node: node("cpu=1", pod("a", "cpu=100m", func(p *v1.Pod) {
				p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", AllocatedResources: res("cpu=800m")}}
			})),
			pod:  pod("new", "cpu=300m"),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 300, used: 800, capacity: 1000"),
		},
		{
			name: "node without pods allocatable admits nothing",
			node: admissiontest.Node{Allocatable: res("cpu=1,pods=0")},
			pod:  pod("new", ""),
			want: reject("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 0, capacity: 0"),
		},
		{
			name: "allocatable, not capacity, is the limit",
			node: admissiontest.Node{Capacity: res("cpu=4"), Allocatable: res("cpu=3500m")},
			pod:  pod("new", "cpu=3600m"),
			want: reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 3600, used: 0, capacity: 3500"),
		},
	}
	runDecisionCases(t, cases)
}

func TestResourceFitDoesNotModifyPods(t *testing.T) {
	p := pod("new", "cpu=1,example.com/fpga=1")
	before := p.DeepCopy()
	fit := admission.NewResourceFit(admission.NodeFunc(func(context.Context) (*v1.Node, error) {
		return admissiontest.Node{Allocatable: res("cpu=2")}.Object(), nil
	}))
	if d := fit.Admit(context.Background(), nodekit.AdmitRequest{Pod: p}); !d.Admit {
		t.Fatalf("got %+v, want admitted", d)
	}
	if _, ok := p.Spec.Containers[0].Resources.Requests["example.com/fpga"]; !ok || !apiequality.Semantic.DeepEqual(p, before) {
		t.Errorf("Admit modified the pod: %+v", p.Spec.Containers[0].Resources)
	}
}
