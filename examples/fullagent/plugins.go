package main

import (
	"fmt"
	"path/filepath"

	"github.com/nodekit/nodekit/pluginwatcher"
)

// pluginHandlers are the plugin kinds the plugin watcher registers, by
// pluginregistration v1 type (pluginwatcher.CSIPlugin,
// pluginwatcher.DRAPlugin): CSI drivers (csi.go) and DRA drivers (dra.go)
// when the agent has an API client. A plugin of a type not here is told
// that no handler serves it, and nothing is registered.
func (a *agent) pluginHandlers() map[string]pluginwatcher.Handler {
	h := map[string]pluginwatcher.Handler{}
	if a.csi != nil {
		h[pluginwatcher.CSIPlugin] = a.csi.handler
	}
	if a.dra != nil {
		h[pluginwatcher.DRAPlugin] = a.dra
	}
	return h
}

// newPluginWatcher builds the watcher of ROOT/plugins_registry
// (upstream's /var/lib/kubelet/plugins_registry), with its
// plugin_manager_total_plugins on /metrics.
func (a *agent) newPluginWatcher() (*pluginwatcher.Watcher, error) {
	w, err := pluginwatcher.New(pluginwatcher.Options{
		Dir:        filepath.Join(a.rootDir, "plugins_registry"),
		Handlers:   a.pluginHandlers(),
		Registerer: a.metrics.reg,
	})
	if err != nil {
		return nil, fmt.Errorf("plugin watcher: %w", err)
	}
	return w, nil
}
