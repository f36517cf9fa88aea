package dratest

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Serve runs the driver until ctx ends: the DRA service on
// PLUGINDIR/dra.sock, the registration socket in registryDir (the agent's
// plugins_registry), and the ResourceSlice of cfg.NodeName published
// through client, and the devices' health (the DRAResourceHealth service,
// from the health file in cfg.StateDir). The node must exist (the slice is owned by it). The
// sockets are removed when Serve returns.
func Serve(ctx context.Context, cfg Config, client kubernetes.Interface, registryDir, pluginDir string) error {
	d, err := NewDriver(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		return fmt.Errorf("dratest: %w", err)
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(cfg.Name),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(registryDir),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		return fmt.Errorf("dratest: start the kubelet plugin helper: %w", err)
	}
	defer h.Stop()
	if err := h.PublishResources(ctx, d.Resources()); err != nil {
		return fmt.Errorf("dratest: publish ResourceSlices: %w", err)
	}
	<-ctx.Done()
	return nil
}
