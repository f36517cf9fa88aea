package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

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

// newCSI builds the CSI parts over the agent's client.
func (a *agent) newCSI(rootDir string) (*csiParts, error) {
	if a.client == nil {
		return nil, nil
	}
	p := &csiParts{drivers: csi.NewDrivers()}
	var err error
	if p.handler, err = csi.NewHandler(csi.HandlerConfig{Drivers: p.drivers, Client: a.client, NodeName: types.NodeName(a.nodeName)}); err != nil {
		return nil, fmt.Errorf("csi: %w", err)
	}
	p.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: rootDir, Drivers: p.drivers, API: csi.FromClient(a.client),
		NodeName: types.NodeName(a.nodeName), Mounter: volumemgr.HostMounter{}})
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
