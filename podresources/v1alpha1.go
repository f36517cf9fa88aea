package podresources

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

// AllPodLister gives every pod the agent was told to run, terminated ones
// included until they are removed (upstream's pod manager GetPods), for
// the v1alpha1 List.
type AllPodLister interface {
	Pods() []*v1.Pod
}

// alphaServer is the deprecated podresources v1alpha1 service, which
// upstream kubelet v1.37 still serves on the same socket beside v1: List
// only, reporting each pod's regular containers and their device-plugin
// devices, nothing else.
type alphaServer struct {
	v1alpha1.UnsafePodResourcesListerServer
	s *Server
}

var _ v1alpha1.PodResourcesListerServer = alphaServer{}

// List reports every pod (Config.AllPods; the active pods when it is nil)
// with its regular containers' devices. As upstream, it counts in
// pod_resources_endpoint_requests_total{server_api_version="v1alpha1"}
// only.
func (a alphaServer) List(context.Context, *v1alpha1.ListPodResourcesRequest) (*v1alpha1.ListPodResourcesResponse, error) {
	a.s.metrics.total.WithLabelValues("v1alpha1").Inc()
	var pods []*v1.Pod
	if a.s.cfg.AllPods != nil {
		pods = a.s.cfg.AllPods.Pods()
	} else {
		pods = a.s.cfg.Pods.ActivePods()
	}
	out := make([]*v1alpha1.PodResources, 0, len(pods))
	for _, p := range pods {
		r := &v1alpha1.PodResources{Name: p.Name, Namespace: p.Namespace,
			Containers: make([]*v1alpha1.ContainerResources, 0, len(p.Spec.Containers))}
		for _, c := range p.Spec.Containers {
			cr := &v1alpha1.ContainerResources{Name: c.Name}
			if a.s.cfg.Devices != nil {
				for _, d := range a.s.cfg.Devices.ContainerDevices(p.UID, c.Name) {
					cr.Devices = append(cr.Devices, &v1alpha1.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: d.DeviceIds})
				}
			}
			r.Containers = append(r.Containers, cr)
		}
		out = append(out, r)
	}
	return &v1alpha1.ListPodResourcesResponse{PodResources: out}, nil
}
