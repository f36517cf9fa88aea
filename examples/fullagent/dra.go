package main

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/syncloop"
)

// newDRA builds the Dynamic Resource Allocation manager (checkpoint
// ROOT/dra_manager_state, as kubelet) when the agent has an API server:
// claims live there. Standalone, it is nil and pods with claims are
// refused in admission (PodFeatures). DRA drivers register through the
// plugin watcher (handler type "DRAPlugin", plugins.go).
//
// A runtime that cannot inject CDI devices (containerd before 1.7) gets no
// manager either: a prepared claim's devices would silently not reach the
// container, so such pods are refused.
func (a *agent) newDRA(ctx context.Context, pods func() []*v1.Pod, ready func() bool) (*dra.Manager, error) {
	if a.client == nil {
		return nil, nil
	}
	version, err := a.runtime.Version(ctx)
	if err != nil {
		return nil, fmt.Errorf("dynamic resource allocation: %w", err)
	}
	if ok, why := runtimeInjectsCDI(version); !ok {
		klog.FromContext(ctx).Info("Dynamic resource allocation is off: pods with resource claims are refused", "reason", why)
		return nil, nil
	}
	client, node := a.client, a.nodeName
	report, messages := healthGates(a.gates)
	m, err := dra.New(dra.Config{
		RootDir: a.rootDir,
		Claims: dra.ClaimGetterFunc(func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
			return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		}),
		// The node's slices of a driver gone for 30 s (all of them at
		// start-up), as kubelet: drivers publish theirs when they register.
		Slices: dra.SliceDeleterFunc(func(ctx context.Context, driver string) error {
			sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: node}
			if driver != "" {
				sel[resourceapi.ResourceSliceSelectorDriver] = driver
			}
			return client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel.String()})
		}),
		ActivePods:     pods,
		SourcesReady:   ready,
		ReportHealth:   report,
		HealthMessages: messages,
	})
	if err != nil {
		return nil, fmt.Errorf("dynamic resource allocation: %w", err)
	}
	return m, nil
}

// runtimeInjectsCDI reports whether the runtime, by its CRI version
// ("containerd://1.6.20"), applies the CDI devices of a container config:
// containerd's CRI plugin does from 1.7 (on by default from 2.0), CRI-O
// and others are taken to.
func runtimeInjectsCDI(runtimeVersion string) (bool, string) {
	name, ver, _ := strings.Cut(runtimeVersion, "://")
	if name != "containerd" {
		return true, ""
	}
	v, err := version.ParseGeneric(ver)
	if err != nil {
		return false, fmt.Sprintf("containerd version %q not understood", ver)
	}
	if v.LessThan(version.MajorMinor(1, 7)) {
		return false, fmt.Sprintf("containerd %s has no CDI device injection (containerd 1.7 or later does)", ver)
	}
	return true, ""
}

// draOptions adds the CDI devices of the containers' claims.
func draOptions(m *dra.Manager, next nodekit.ContainerOptionsFunc) nodekit.ContainerOptionsFunc {
	if m == nil {
		return next
	}
	return m.WrapOptions(next)
}

// draSync gives the sync loop the manager, or nothing (a nil *Manager in
// the interface would be called).
func draSync(m *dra.Manager) syncloop.DynamicResources {
	if m == nil {
		return nil
	}
	return m
}
