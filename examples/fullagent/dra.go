package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/syncloop"
)

// newDRA builds the Dynamic Resource Allocation manager (checkpoint
// ROOT/dra_manager_state, as kubelet) when the agent has an API server:
// claims live there. Standalone, it is nil and pods with claims are
// refused in admission (PodFeatures). DRA drivers register through the
// plugin watcher (handler type "DRAPlugin", plugins.go).
func (a *agent) newDRA(pods func() []*v1.Pod, ready func() bool) (*dra.Manager, error) {
	if a.client == nil {
		return nil, nil
	}
	client, node := a.client, a.nodeName
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
		ActivePods:   pods,
		SourcesReady: ready,
	})
	if err != nil {
		return nil, fmt.Errorf("dynamic resource allocation: %w", err)
	}
	return m, nil
}

// draAdmission admits pods with claims (PodFeatures with
// WithDynamicResources) when the agent prepares them.
func draAdmission(list []nodekit.Admitter, m *dra.Manager) []nodekit.Admitter {
	if m == nil {
		return list
	}
	for i, ad := range list {
		if _, ok := ad.(*admission.PodFeatures); ok {
			list[i] = admission.NewPodFeatures(admission.WithDynamicResources())
		}
	}
	return list
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
