package main

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/statusmgr"
)

// newDevices builds the device plugin manager over ROOT/device-plugins
// (upstream's /var/lib/kubelet/device-plugins). Containers that were
// running when the agent started keep their checkpointed devices until
// their plugin registers again. pods lists the loop's active pods once the
// agent runs.
func (a *agent) newDevices(ctx context.Context, pods func() []*v1.Pod, ready func() bool) (*devicemgr.Manager, error) {
	running := map[types.UID]map[string]bool{}
	if rps, err := a.runtime.ListPods(ctx, false); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to list running containers for the device manager")
	} else {
		for _, p := range rps {
			for _, c := range p.Containers {
				if running[p.ID] == nil {
					running[p.ID] = map[string]bool{}
				}
				running[p.ID][c.Name] = true
			}
		}
	}
	cfg := devicemgr.Config{
		Dir:          filepath.Join(a.rootDir, "device-plugins"),
		ActivePods:   pods,
		SourcesReady: ready,
		RunningAtStart: func(uid types.UID, name string) bool {
			return running[uid][name]
		},
	}
	cfg.ReportHealth, _ = healthGates(a.gates)
	// Plugins may answer with CDI devices; a runtime that cannot inject
	// them fails such containers rather than running them without.
	if version, err := a.runtime.Version(ctx); err != nil {
		return nil, fmt.Errorf("device plugins: %w", err)
	} else if ok, why := runtimeInjectsCDI(version); !ok {
		cfg.NoCDI = why
	}
	m, err := devicemgr.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("device plugins: %w", err)
	}
	return m, nil
}

// deviceStatus puts the plugins' extended resources into the node's
// capacity and allocatable, and drops those whose plugin has gone.
func deviceStatus(m *devicemgr.Manager) statusmgr.StatusSetter {
	return statusmgr.StatusSetterFunc(func(_ context.Context, node *v1.Node) error {
		capacity, allocatable, removed := m.Resources()
		if node.Status.Capacity == nil {
			node.Status.Capacity = v1.ResourceList{}
		}
		if node.Status.Allocatable == nil {
			node.Status.Allocatable = v1.ResourceList{}
		}
		for k, q := range capacity {
			node.Status.Capacity[k] = q
		}
		for k, q := range allocatable {
			node.Status.Allocatable[k] = q
		}
		for _, r := range removed {
			delete(node.Status.Capacity, v1.ResourceName(r))
			delete(node.Status.Allocatable, v1.ResourceName(r))
		}
		return nil
	})
}

// builtins are admission.Builtins, except that resource fit sees, for
// each pod, the node's allocatable with the devices the pod already holds
// counted in (upstream's UpdatePluginResources): after a restart a pod
// keeps its devices even before their plugin has registered again. Pods
// with DRA claims are admitted when dynamicResources (the agent prepares
// them); pods with RestartAllContainers rules are refused with the gate
// off.
func builtins(node admission.NodeGetter, devices *devicemgr.Manager, gates featuregate.FeatureGate, dynamicResources bool) []nodekit.Admitter {
	var opts []admission.PodFeaturesOption
	if dynamicResources {
		// The DRA manager prepares claims (dra.go).
		opts = append(opts, admission.WithDynamicResources())
	}
	if !gates.Enabled(admission.FeatureRestartAllContainersOnContainerExits) {
		// As kubelet with the gate off, the node does not restart all
		// containers in place; it refuses such pods rather than treat
		// the rule as absent.
		opts = append(opts, admission.WithoutRestartAllContainers())
	}
	out := admission.Builtins(node, opts...)
	for i, ad := range out {
		if _, ok := ad.(*admission.ResourceFit); !ok {
			continue
		}
		out[i] = nodekit.AdmitFunc(func(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
			perPod := admission.NodeFunc(func(ctx context.Context) (*v1.Node, error) {
				n, err := node.Node(ctx)
				if err != nil || n == nil {
					return n, err
				}
				n = n.DeepCopy()
				n.Status.Allocatable = devices.SanitizeAllocatable(req.Pod, n.Status.Allocatable)
				return n, nil
			})
			return admission.NewResourceFit(perPod).Admit(ctx, req)
		})
	}
	return out
}
