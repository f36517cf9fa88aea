package devicemgr

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit"
)

// TestAllocatedResourcesStatus: a container's devices, one entry per
// resource, Healthy or Unhealthy as ListAndWatch last said; a health
// change of a held device (not of a free one) sends the pod on
// HealthUpdates with ReportHealth, and nothing without it.
func TestAllocatedResourcesStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, reportHealth := range []bool{true, false} {
		active := &podSet{}
		m := newTestManager(t, ctx, Config{ActivePods: active.list, ReportHealth: reportHealth})
		ep := attach(m, "example.com/foo", &fakeClient{resource: "example.com/foo"}, nil)
		report(ctx, m, ep, map[string]bool{"f0": true, "f1": false})
		pod := newPod("p", nil, container("app", map[string]int{"example.com/foo": 1}), v1.Container{Name: "none"})
		active.add(pod)
		if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
			t.Fatal(d)
		}
		want := []v1.ResourceStatus{{Name: "example.com/foo", Resources: []v1.ResourceHealth{{ResourceID: "f0", Health: v1.ResourceHealthStatusHealthy}}}}
		if got := m.AllocatedResourcesStatus(pod, "app"); !equalStatus(got, want) {
			t.Fatalf("healthy: %+v, want %+v", got, want)
		}
		if got := m.AllocatedResourcesStatus(pod, "none"); got != nil {
			t.Errorf("a container without devices: %+v, want nil", got)
		}
		report(ctx, m, ep, map[string]bool{"f0": true, "f1": true}) // a free device changes
		if n := len(m.HealthUpdates()); n != 0 {
			t.Errorf("ReportHealth %v: %d notices after a free device changed, want none", reportHealth, n)
		}
		report(ctx, m, ep, map[string]bool{"f0": false, "f1": true})
		want[0].Resources[0].Health = v1.ResourceHealthStatusUnhealthy
		if got := m.AllocatedResourcesStatus(pod, "app"); !equalStatus(got, want) {
			t.Errorf("unhealthy: %+v, want %+v", got, want)
		}
		var got []types.UID
		for len(m.HealthUpdates()) > 0 {
			got = append(got, <-m.HealthUpdates())
		}
		if reportHealth && (len(got) != 1 || got[0] != pod.UID) {
			t.Errorf("notices %v, want [%s]", got, pod.UID)
		}
		if !reportHealth && len(got) != 0 {
			t.Errorf("ReportHealth off: notices %v, want none", got)
		}
	}
}

func equalStatus(a, b []v1.ResourceStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || len(a[i].Resources) != len(b[i].Resources) {
			return false
		}
		for j := range a[i].Resources {
			if a[i].Resources[j] != b[i].Resources[j] {
				return false
			}
		}
	}
	return true
}
