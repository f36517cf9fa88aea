package admissiontest_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission/admissiontest"
)

// Example shows a table test of a custom admitter through the same chain the
// agent runs.
func Example() {
	// The policy under test: at most two pods per priority class.
	perClass := nodekit.AdmitFunc(func(_ context.Context, r nodekit.AdmitRequest) nodekit.Decision {
		n := 0
		for _, p := range r.Pods {
			if p.Spec.PriorityClassName == r.Pod.Spec.PriorityClassName {
				n++
			}
		}
		if n >= 2 {
			return nodekit.Decision{Reason: "PriorityClassFull", Message: "two pods of this class already run here"}
		}
		return nodekit.Admitted
	})
	batch := func(name, cpu string) *v1.Pod {
		p := admissiontest.Pod(name, admissiontest.Resources("cpu="+cpu))
		p.Spec.PriorityClassName = "batch"
		return p
	}
	node := admissiontest.Node{
		Allocatable: admissiontest.Resources("cpu=2,memory=4Gi"),
		Pods:        []*v1.Pod{batch("a", "500m"), batch("b", "500m")},
	}
	for _, p := range []*v1.Pod{batch("c", "100m"), batch("huge", "4"), admissiontest.Pod("web", nil)} {
		d := node.Admit(context.Background(), p, perClass)
		fmt.Printf("%-4s admit=%v %s\n", p.Name, d.Admit, d.Reason)
	}
	// Output:
	// c    admit=false PriorityClassFull
	// huge admit=false OutOfcpu
	// web  admit=true
}

func TestNodeObjectDefaults(t *testing.T) {
	caps := admissiontest.Resources("cpu=4, memory=8Gi")
	n := admissiontest.Node{Capacity: caps, Labels: map[string]string{"zone": "a", v1.LabelHostname: "custom"}}
	o := n.Object()
	if o.Name != "node" {
		t.Errorf("name %q, want node", o.Name)
	}
	wantLabels := map[string]string{"zone": "a", v1.LabelHostname: "custom", v1.LabelOSStable: runtime.GOOS, v1.LabelArchStable: runtime.GOARCH}
	if fmt.Sprint(o.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels %v, want %v", o.Labels, wantLabels)
	}
	if got := o.Status.Allocatable.Cpu().String(); got != "4" {
		t.Errorf("allocatable cpu %s, want capacity's 4", got)
	}
	if got := o.Status.Allocatable.Pods().Value(); got != admissiontest.DefaultMaxPods {
		t.Errorf("allocatable pods %d, want %d", got, admissiontest.DefaultMaxPods)
	}
	if _, ok := caps[v1.ResourcePods]; ok {
		t.Error("Object modified the caller's Capacity")
	}
	if len(n.Labels) != 2 {
		t.Error("Object modified the caller's Labels")
	}
}

func TestResources(t *testing.T) {
	rl := admissiontest.Resources("cpu=500m,memory=1Gi, example.com/gpu=2")
	if len(rl) != 3 || rl.Cpu().MilliValue() != 500 || rl.Memory().Value() != 1<<30 {
		t.Errorf("got %v", rl)
	}
	if len(admissiontest.Resources("")) != 0 {
		t.Error("empty string should give an empty list")
	}
	for _, bad := range []string{"cpu", "cpu=lots", "=1"} {
		t.Run(bad, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Resources(%q) did not panic", bad)
				}
			}()
			admissiontest.Resources(bad)
		})
	}
}
