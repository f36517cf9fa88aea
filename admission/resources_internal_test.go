package admission

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// statusPod is a pod whose status may or may not carry resources.
type statusPod struct{ *v1.Pod }

func (statusPod) Generate(r *rand.Rand, _ int) reflect.Value {
	list := func() v1.ResourceList {
		rl := v1.ResourceList{}
		if r.Intn(3) > 0 {
			rl[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(r.Intn(2000)), resource.DecimalSI)
		}
		if r.Intn(3) > 0 {
			rl[v1.ResourceMemory] = *resource.NewQuantity(int64(r.Intn(2000))<<20, resource.BinarySI)
		}
		if r.Intn(4) == 0 {
			rl["example.com/gpu"] = *resource.NewQuantity(int64(r.Intn(3)), resource.DecimalSI)
		}
		return rl
	}
	maybe := func() v1.ResourceList {
		if r.Intn(3) == 0 {
			return list()
		}
		return nil
	}
	p := &v1.Pod{}
	always := v1.ContainerRestartPolicyAlways
	for i := range 1 + r.Intn(3) {
		name := fmt.Sprintf("c%d", i)
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: list()}})
		if r.Intn(2) == 0 {
			cs := v1.ContainerStatus{Name: name, AllocatedResources: maybe()}
			if rl := maybe(); rl != nil {
				cs.Resources = &v1.ResourceRequirements{Requests: rl}
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
		}
	}
	for i := range r.Intn(3) {
		c := v1.Container{Name: fmt.Sprintf("i%d", i), Resources: v1.ResourceRequirements{Requests: list()}}
		if r.Intn(2) == 0 {
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		if r.Intn(3) == 0 {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, v1.ContainerStatus{Name: c.Name, AllocatedResources: maybe()})
		}
	}
	if r.Intn(4) == 0 {
		p.Spec.Resources = &v1.ResourceRequirements{Requests: list()}
	}
	if r.Intn(4) == 0 {
		p.Spec.Overhead = list()
	}
	if r.Intn(5) == 0 {
		p.Status.AllocatedResources = list()
	}
	if r.Intn(5) == 0 {
		p.Status.Resources = &v1.ResourceRequirements{Requests: maybe()}
	}
	if r.Intn(6) == 0 {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Reason: v1.PodReasonInfeasible}}
	}
	return reflect.ValueOf(statusPod{p})
}

// TestAdmittedRequestsMatchesUpstream checks the spec-only shortcut against
// the full status-aware computation.
func TestAdmittedRequestsMatchesUpstream(t *testing.T) {
	shortcuts := 0
	prop := func(p statusPod) bool {
		if !statusHasResources(p.Pod) {
			shortcuts++
		}
		got := amountsOf(admittedRequests(p.Pod))
		want := amountsOf(resourcehelper.PodRequests(p.Pod, resourcehelper.PodResourcesOptions{
			UseStatusResources: true,
			InPlacePodLevelResourcesVerticalScalingEnabled: true,
		}))
		if !reflect.DeepEqual(got, want) {
			t.Logf("pod %+v: got %+v, want %+v", p.Spec, got, want)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 2000, Rand: rand.New(rand.NewSource(7))}); err != nil {
		t.Error(err)
	}
	if shortcuts == 0 {
		t.Error("the generator never produced a pod without status resources")
	}
}

func TestResourceNames(t *testing.T) {
	cases := []struct {
		name             v1.ResourceName
		extended, scalar bool
	}{
		{"cpu", false, false},
		{"pods", false, false},
		{"storage", false, false},
		{"example.com/gpu", true, true},
		{"nvidia.com/gpu", true, true},
		{"kubernetes.io/foo", false, true},
		{"node.kubernetes.io/bar", false, true},
		{"hugepages-2Mi", false, true},
		{"attachable-volumes-aws-ebs", false, true},
		{"requests.example.com/x", false, false},
		{"example.com/bad name", false, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.name), func(t *testing.T) {
			if got := isExtendedResourceName(tc.name); got != tc.extended {
				t.Errorf("isExtendedResourceName = %v, want %v", got, tc.extended)
			}
			if got := isScalarResourceName(tc.name); got != tc.scalar {
				t.Errorf("isScalarResourceName = %v, want %v", got, tc.scalar)
			}
		})
	}
}
