package main

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/featuregate"

	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/syncloop"
)

// The gates of device health in container status, beta and on by default
// in kubelet v1.37.
const (
	featureResourceHealthStatus        = "ResourceHealthStatus"
	featureResourceHealthStatusMessage = "ResourceHealthStatusMessage"
)

// healthGates says whether device health is reported, and with the
// drivers' messages.
func healthGates(gates featuregate.FeatureGate) (report, messages bool) {
	report = gates.Enabled(featureResourceHealthStatus)
	return report, report && gates.Enabled(featureResourceHealthStatusMessage)
}

// resourceHealth is the loop's ResourceHealth: the device plugins' then
// DRA's (upstream's order), none with ResourceHealthStatus off.
func resourceHealth(gates featuregate.FeatureGate, devices *devicemgr.Manager, m *dra.Manager) []syncloop.ResourceHealth {
	if report, _ := healthGates(gates); !report {
		return nil
	}
	var out []syncloop.ResourceHealth
	if devices != nil {
		out = append(out, devices)
	}
	if m != nil {
		out = append(out, m)
	}
	return out
}

// healthUpdates are the managers' notices of pods whose devices' health
// changed, for the probe relay to wake their workers (nil channels for a
// manager the agent lacks never fire).
func healthUpdates(devices *devicemgr.Manager, m *dra.Manager) (dev, claims <-chan types.UID) {
	if devices != nil {
		dev = devices.HealthUpdates()
	}
	if m != nil {
		claims = m.HealthUpdates()
	}
	return dev, claims
}
