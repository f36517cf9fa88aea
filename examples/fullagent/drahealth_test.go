package main

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/agenttest/dratest"
)

// TestDRADeviceHealth: the DRA test driver serves device health; the
// running pod's container status shows its claim's device in
// allocatedResourcesStatus (claim:dev, the device's CDI ID) Healthy, then
// Unhealthy with the driver's message once the driver marks it so, then
// Healthy again, each within seconds (the change wakes the pod; the
// periodic sync is a minute). On containerd 2, which injects CDI devices.
func TestDRADeviceHealth(t *testing.T) {
	e, drv := startDRAEnv(t, 1)
	createDRAPod(t, e, "dra-h")
	e.waitPod(t, "dra-h", 3*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	claim := podClaim(t, e, "dra-h")
	device := claim.Status.Allocation.Devices.Results[0].Device
	id := v1.ResourceID("dra.nodekit.test/device=claim-" + string(claim.UID))

	e.waitResourceHealth(t, "dra-h", "claim:dev", id, v1.ResourceHealthStatusHealthy, "")
	if err := drv.SetHealth(map[string]dratest.DeviceHealth{device: {Health: v1.ResourceHealthStatusUnhealthy, Message: "overheated"}}); err != nil {
		t.Fatal(err)
	}
	d := e.waitResourceHealth(t, "dra-h", "claim:dev", id, v1.ResourceHealthStatusUnhealthy, "overheated")
	t.Logf("Unhealthy in the API %v after the driver's change", d.Round(10*time.Millisecond))
	if d > 20*time.Second {
		t.Errorf("the change took %v to reach the API: not woken by the health notice", d)
	}
	if err := drv.SetHealth(nil); err != nil {
		t.Fatal(err)
	}
	d = e.waitResourceHealth(t, "dra-h", "claim:dev", id, v1.ResourceHealthStatusHealthy, "")
	t.Logf("Healthy again in the API %v after the driver's change", d.Round(10*time.Millisecond))
}
