package csi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/kubeclient"
)

// PluginName is the upstream name of the CSI volume plugin; log and error
// messages start with it, as upstream's.
const PluginName = "kubernetes.io/csi"

// DefaultTimeout bounds each call to a driver, as upstream's csiTimeout.
const DefaultTimeout = 2 * time.Minute

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Drivers is the registry the handler fills; required.
	Drivers *Drivers
	// Client updates the CSINode and Node objects; nil keeps only the
	// registry (a standalone agent, as upstream without a kube client).
	Client kubeclient.Interface
	// NodeName is the node's name; required with Client.
	NodeName types.NodeName
	// Timeout bounds NodeGetInfo; zero means DefaultTimeout.
	Timeout time.Duration
	// Metrics, if set, observes NodeGetInfo (RegisterMetrics).
	Metrics *Metrics
}

// Handler is the plugin-registration handler of CSI drivers: a plugin
// watcher calls it for every socket of type CSIPlugin.
type Handler struct {
	cfg HandlerConfig
}

// NewHandler checks cfg and returns a Handler.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Drivers == nil {
		return nil, errors.New("csi: HandlerConfig.Drivers is required")
	}
	if cfg.Client != nil && cfg.NodeName == "" {
		return nil, errors.New("csi: HandlerConfig.NodeName is required with Client")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Handler{cfg: cfg}, nil
}

func logf(format string, args ...any) string {
	return PluginName + ": " + fmt.Sprintf(format, args...)
}

// ValidatePlugin checks that a driver about to register speaks a CSI
// version this node supports (1.x) and is not older than a driver already
// registered under the same name.
func (h *Handler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	klog.FromContext(ctx).Info("Validating a new CSI driver", "driver", name, "endpoint", endpoint, "versions", strings.Join(versions, ","))
	if _, err := h.validateVersions("ValidatePlugin", name, versions); err != nil {
		return fmt.Errorf("validation failed for CSI Driver %s at endpoint %s: %w", name, endpoint, err)
	}
	return nil
}

func (h *Handler) validateVersions(caller, name string, versions []string) (*utilversion.Version, error) {
	if len(versions) == 0 {
		return nil, errors.New(logf("%s for CSI driver %q failed. Plugin returned an empty list for supported versions", caller, name))
	}
	// Only CSI 1.x: 0.x is no longer supported, 2.x need not be compatible.
	highest, err := utilversion.HighestSupportedVersion(versions)
	if err != nil {
		return nil, errors.New(logf("%s for CSI driver %q failed. None of the versions specified %q are supported. err=%v", caller, name, versions, err))
	}
	if old, ok := h.cfg.Drivers.Get(name); ok && !old.Version.LessThan(highest) {
		return nil, errors.New(logf("%s for CSI driver %q failed. Another driver with the same name is already registered with a higher supported version: %q", caller, name, old.Version))
	}
	return highest, nil
}

// RegisterPlugin records the driver, asks it for its node information and
// publishes it in the CSINode object and the Node's annotation and labels.
// On failure the driver is removed from the registry again.
func (h *Handler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error {
	klog.FromContext(ctx).Info("Registering CSI driver", "driver", name, "endpoint", endpoint)
	highest, err := h.validateVersions("RegisterPlugin", name, versions)
	if err != nil {
		return err
	}
	h.cfg.Drivers.set(name, Driver{Endpoint: endpoint, Version: highest})
	info, err := h.nodeGetInfo(ctx, name, endpoint)
	if err == nil {
		err = h.install(ctx, name, info)
	}
	if err != nil {
		h.cfg.Drivers.remove(name)
		return err
	}
	return nil
}

func (h *Handler) nodeGetInfo(ctx context.Context, name, endpoint string) (*nodeInfo, error) {
	c, err := dial(endpoint, name, h.cfg.Metrics)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	return c.getInfo(ctx)
}

// DeRegisterPlugin forgets the driver and removes it from the CSINode
// object and the Node's annotation.
func (h *Handler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	logger := klog.FromContext(ctx)
	logger.Info("Deregistering CSI driver", "driver", name, "endpoint", endpoint)
	h.cfg.Drivers.remove(name)
	if err := h.uninstall(ctx, name); err != nil {
		logger.Error(err, "Deregistering CSI driver failed", "driver", name)
	}
}
