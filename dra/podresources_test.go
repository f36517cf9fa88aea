package dra

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestDynamicResourcesForPodResources: the podresources view of a
// container's claims, filtered by request as the CDI devices are; nothing
// before the claim is prepared, nothing for a container without claims.
func TestDynamicResourcesForPodResources(t *testing.T) {
	d := startDriver(t)
	d.requests["c"] = []string{"r1", "r2"}
	one := podWith("one", "r1", "c")
	one.Spec.Containers = append(one.Spec.Containers, v1.Container{Name: "nothing"})
	cl := &claims{}
	cl.add(allocated("c", []string{"r1", "r2"}, one))
	m := newManager(t, t.TempDir(), cl, d)
	if got := m.DynamicResources(one, &one.Spec.Containers[0]); len(got) != 0 {
		t.Fatalf("before prepare: %v, want none", got)
	}
	if err := m.PrepareResources(t.Context(), one); err != nil {
		t.Fatal(err)
	}
	got := m.DynamicResources(one, &one.Spec.Containers[0])
	if len(got) != 1 || got[0].ClaimName != "c" || got[0].ClaimNamespace != one.Namespace || len(got[0].ClaimResources) != 1 {
		t.Fatalf("DynamicResources = %v, want claim c with one device", got)
	}
	r := got[0].ClaimResources[0]
	if r.DriverName != testDriver || r.DeviceName == "" || len(r.CdiDevices) != 1 || r.CdiDevices[0].Name != testDriver+"/dev=c-r1" {
		t.Errorf("claim resource = %v, want %s's device of request r1 with CDI device %s/dev=c-r1", r, testDriver, testDriver)
	}
	if got := m.DynamicResources(one, &one.Spec.Containers[1]); len(got) != 0 {
		t.Errorf("container without claims: %v, want none", got)
	}
}
