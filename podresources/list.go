package podresources

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// List reports the resources of every active pod.
func (s *Server) List(context.Context, *api.ListPodResourcesRequest) (*api.ListPodResourcesResponse, error) {
	s.metrics.count(s.metrics.list)
	pods := s.cfg.Pods.ActivePods()
	out := make([]*api.PodResources, 0, len(pods))
	for _, p := range pods {
		out = append(out, s.podResources(p))
	}
	return &api.ListPodResourcesResponse{PodResources: out}, nil
}

// Get reports the resources of one active pod.
func (s *Server) Get(_ context.Context, req *api.GetPodResourcesRequest) (*api.GetPodResourcesResponse, error) {
	s.metrics.count(s.metrics.get)
	for _, p := range s.cfg.Pods.ActivePods() {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &api.GetPodResourcesResponse{PodResources: s.podResources(p)}, nil
		}
	}
	s.metrics.getErrors.WithLabelValues("v1").Inc()
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// GetAllocatableResources reports what the providers can hand out.
func (s *Server) GetAllocatableResources(context.Context, *api.AllocatableResourcesRequest) (*api.AllocatableResourcesResponse, error) {
	s.metrics.count(s.metrics.getAllocatable)
	resp := &api.AllocatableResourcesResponse{}
	if s.cfg.Devices != nil {
		resp.Devices = s.cfg.Devices.AllocatableDevices()
	}
	if s.cfg.CPUs != nil {
		resp.CpuIds = s.cfg.CPUs.AllocatableCPUs()
	}
	if s.cfg.Memory != nil {
		resp.Memory = s.cfg.Memory.AllocatableMemory()
	}
	return resp, nil
}

// podResources reports the restartable init containers, then the
// regular containers, as upstream.
func (s *Server) podResources(p *v1.Pod) *api.PodResources {
	r := &api.PodResources{Name: p.Name, Namespace: p.Namespace}
	r.Containers = make([]*api.ContainerResources, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
			continue
		}
		r.Containers = append(r.Containers, s.containerResources(p, c))
	}
	for i := range p.Spec.Containers {
		r.Containers = append(r.Containers, s.containerResources(p, &p.Spec.Containers[i]))
	}
	return r
}

func (s *Server) containerResources(p *v1.Pod, c *v1.Container) *api.ContainerResources {
	r := &api.ContainerResources{Name: c.Name}
	if s.cfg.Devices != nil {
		r.Devices = s.cfg.Devices.ContainerDevices(p.UID, c.Name)
	}
	if s.cfg.CPUs != nil {
		r.CpuIds = s.cfg.CPUs.ContainerCPUs(p.UID, c.Name)
	}
	if s.cfg.Memory != nil {
		r.Memory = s.cfg.Memory.ContainerMemory(p.UID, c.Name)
	}
	if s.cfg.DynamicResources != nil {
		r.DynamicResources = s.cfg.DynamicResources.DynamicResources(p, c)
	}
	return r
}
