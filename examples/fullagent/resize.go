package main

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/allocation"
	"github.com/nodekit/nodekit/cgroupmgr"
	"github.com/nodekit/nodekit/events"
)

// newResizer builds in-place pod resize: allocations checkpointed in the
// root dir (upstream's allocated_pods_state and actuated_pods_state), a
// resize admitted by the same resource fit as new pods, applied through
// CRI UpdateContainerResources and the pod cgroup (the runtime told first
// through CRI UpdatePodSandboxResources), pod-level resources
// (spec.resources) included (InPlacePodLevelResourcesVerticalScaling, beta
// and on in v1.37), the pod's status.resources read back from its cgroup,
// with upstream's Resize* events on the pod and its
// resize metrics (the requested resizes counted from the loop's pod
// updates).
func (a *agent) newResizer(rootDir string, node admission.NodeGetter, recorder *events.Recorder) (*allocation.Manager, error) {
	cfg := allocation.Config{
		Recorder:   recorder,
		RootDir:    filepath.Clean(rootDir),
		Fit:        admission.NewResourceFit(node),
		Pods:       a.pods.ActivePods,
		Containers: a.runtime,
		Usage:      a.runtime,
		Node: allocation.NodeConfig{
			CPUManagerStatic:    a.cfg.CPUManagerPolicy == "static",
			MemoryManagerStatic: a.cfg.MemoryManagerPolicy == "Static",
		},
	}
	if a.cgroups != nil && a.cgroups.m != nil {
		cfg.PodCgroup = a.cgroups.m // a nil *Manager must not become a non-nil interface
		cfg.PodUsage = a.cgroups.m
		cfg.Sandbox = a.runtime // told before each pod cgroup change, as upstream
		cfg.PodCgroupReader = podCgroupReader(a.cgroups.m)
	}
	a.resizeMetrics = allocation.NewMetrics() // kubelet_container_requested_resizes_total, kubelet_pod_*_resizes...
	if err := a.resizeMetrics.Register(a.metrics.reg); err != nil {
		return nil, err
	}
	cfg.Metrics = a.resizeMetrics
	m, err := allocation.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("in-place resize state in %s: %w", rootDir, err)
	}
	return m, nil
}

// podCgroupReader reads a running pod's cgroup back for its
// status.resources, as upstream reports them.
func podCgroupReader(m *cgroupmgr.Manager) allocation.PodCgroupReader {
	return allocation.PodCgroupReaderFunc(func(ctx context.Context, pod *v1.Pod) (allocation.PodCgroupValues, error) {
		rc, err := m.ReadPodCgroup(ctx, pod)
		return allocation.PodCgroupValues{CPUShares: rc.CPUShares, CPUQuota: rc.CPUQuota, CPUPeriod: rc.CPUPeriod, Memory: rc.Memory}, err
	})
}
