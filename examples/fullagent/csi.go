package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/events"
	"github.com/nodekit/nodekit/stats"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// csiParts are the CSI driver registry, the registration handler the
// plugin watcher calls for CSIPlugin sockets (plugins.go) and the
// kubernetes.io/csi volume plugin. A standalone agent (no API client) has
// none: persistentVolumeClaim, ephemeral and csi volumes keep failing with
// "no volume plugin matched", and a CSI driver's registration is refused.
type csiParts struct {
	drivers *csi.Drivers
	handler *csi.Handler
	plugin  *csi.Plugin
}

// newCSI builds the CSI parts over the agent's client; recorder gets the
// online-expansion events.
func (a *agent) newCSI(rootDir string, recorder *events.Recorder) (*csiParts, error) {
	if a.client == nil {
		return nil, nil
	}
	p := &csiParts{drivers: csi.NewDrivers()}
	// csi_operations_seconds and storage_operation_duration_seconds, only
	// where CSI volumes can be mounted.
	metrics, err := csi.RegisterMetrics(a.metrics.reg, nil)
	if err != nil {
		return nil, fmt.Errorf("csi: metrics: %w", err)
	}
	if p.handler, err = csi.NewHandler(csi.HandlerConfig{Drivers: p.drivers, Client: a.client, NodeName: types.NodeName(a.nodeName), Metrics: metrics}); err != nil {
		return nil, fmt.Errorf("csi: %w", err)
	}
	// CSIDriver tokenRequests: the pod's service-account tokens, from the
	// API server, cached as projected volumes' are.
	tokens := volumemgr.CachedTokens(volumemgr.FromClient(a.client), clock.RealClock{})
	p.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: rootDir, Drivers: p.drivers, API: csi.FromClient(a.client),
		NodeName: types.NodeName(a.nodeName), Mounter: volumemgr.HostMounter{}, Metrics: metrics, Tokens: tokens, Events: recorder,
		Attach: csi.AttachFromClient(a.client)}) // attachRequired drivers: wait for the controller's attachment (attach.go)
	if err != nil {
		return nil, fmt.Errorf("csi: %w", err)
	}
	return p, nil
}

// volumePlugins are the volume plugins tried before volumemgr's built-in
// ones.
func (p *csiParts) volumePlugins() []volumemgr.Plugin {
	if p == nil {
		return nil
	}
	return []volumemgr.Plugin{p.plugin}
}

// statsConfig adds the CSI plugin to the stats provider's config: the
// pods' claims and csi volumes are measured by it (NodeGetVolumeStats).
// A standalone agent has no CSI volumes to measure.
func (p *csiParts) statsConfig(cfg *stats.Config) {
	if p == nil {
		return
	}
	cfg.Volumes = p.plugin
}
