package main

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/devicemgr/deviceplugintest"
)

// TestDevicePluginHealth: a pod's container holding a device-plugin
// device shows it in allocatedResourcesStatus (example.com/foo, the
// device ID) Healthy; the plugin's ListAndWatch marking it unhealthy
// turns it Unhealthy in the API within seconds (the change wakes the pod;
// the periodic sync is a minute), and healthy again turns it back.
func TestDevicePluginHealth(t *testing.T) {
	e := startProcEnv(t)
	plugin := startFooPlugin(t, e.root)
	e.waitAllocatable(t, 2)
	e.createPod(t, fooPod("devh"))
	p := e.waitPod(t, "devh", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	dev := strings.TrimSpace(e.exec(t, p, "app", "sh", "-c", "echo $"+deviceplugintest.DefaultEnv))
	if dev == "" || strings.Contains(dev, ",") {
		t.Fatalf("the pod's device: %q, want one", dev)
	}
	waitHealth := func(what string, health v1.ResourceHealthStatus) time.Duration {
		t.Helper()
		start := time.Now()
		e.waitPod(t, "devh", time.Minute, what, func(p *v1.Pod) bool {
			cs := containerStatus(p, "app")
			if cs == nil || len(cs.AllocatedResourcesStatus) != 1 {
				return false
			}
			rs := cs.AllocatedResourcesStatus[0]
			return rs.Name == fooResource && len(rs.Resources) == 1 &&
				rs.Resources[0].ResourceID == v1.ResourceID(dev) && rs.Resources[0].Health == health && rs.Resources[0].Message == nil
		})
		return time.Since(start)
	}
	waitHealth(fooResource+" Healthy", v1.ResourceHealthStatusHealthy)
	if !plugin.SetHealthy(dev, false) {
		t.Fatalf("the plugin has no device %s", dev)
	}
	d := waitHealth(fooResource+" Unhealthy", v1.ResourceHealthStatusUnhealthy)
	t.Logf("Unhealthy in the API %v after the plugin's change", d.Round(10*time.Millisecond))
	if d > 20*time.Second {
		t.Errorf("the change took %v to reach the API: not woken by the health notice", d)
	}
	plugin.SetHealthy(dev, true)
	d = waitHealth(fooResource+" Healthy again", v1.ResourceHealthStatusHealthy)
	t.Logf("Healthy again in the API %v after the plugin's change", d.Round(10*time.Millisecond))
}
