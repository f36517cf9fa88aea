package main

import (
	"fmt"
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
	e.waitResourceHealth(t, "devh", fooResource, v1.ResourceID(dev), v1.ResourceHealthStatusHealthy, "")
	if !plugin.SetHealthy(dev, false) {
		t.Fatalf("the plugin has no device %s", dev)
	}
	d := e.waitResourceHealth(t, "devh", fooResource, v1.ResourceID(dev), v1.ResourceHealthStatusUnhealthy, "")
	t.Logf("Unhealthy in the API %v after the plugin's change", d.Round(10*time.Millisecond))
	if d > 20*time.Second {
		t.Errorf("the change took %v to reach the API: not woken by the health notice", d)
	}
	plugin.SetHealthy(dev, true)
	d = e.waitResourceHealth(t, "devh", fooResource, v1.ResourceID(dev), v1.ResourceHealthStatusHealthy, "")
	t.Logf("Healthy again in the API %v after the plugin's change", d.Round(10*time.Millisecond))
}

// waitResourceHealth waits up to a minute for the app container of pod to
// show one allocatedResourcesStatus entry, name, of one resource id with
// health and message msg ("" is none), and returns how long it took.
func (e *procEnv) waitResourceHealth(t *testing.T, pod string, name v1.ResourceName, id v1.ResourceID, health v1.ResourceHealthStatus, msg string) time.Duration {
	t.Helper()
	start := time.Now()
	e.waitPod(t, pod, time.Minute, fmt.Sprintf("%s %s %s %q", name, id, health, msg), func(p *v1.Pod) bool {
		cs := containerStatus(p, "app")
		if cs == nil || len(cs.AllocatedResourcesStatus) != 1 {
			return false
		}
		rs := cs.AllocatedResourcesStatus[0]
		if rs.Name != name || len(rs.Resources) != 1 {
			return false
		}
		r := rs.Resources[0]
		got := ""
		if r.Message != nil {
			got = *r.Message
		}
		return r.ResourceID == id && r.Health == health && got == msg
	})
	return time.Since(start)
}
