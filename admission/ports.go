package admission

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// NodePorts rejects a pod that asks for a host port already taken by an
// admitted pod (AdmitRequest.Pods, without terminal pods and the pod itself).
// Reason NodePorts, message "Predicate NodePorts failed: node(s) didn't have
// free ports for the requested pod ports".
//
// The rules are upstream's: the ports of regular containers and of sidecars
// (restartable init containers) with hostPort > 0 count; a port is the triple
// (hostIP, protocol, hostPort) with an empty hostIP meaning 0.0.0.0 and an
// empty protocol TCP; a port on 0.0.0.0 conflicts with the same protocol and
// port on any IP, and a port on a specific IP conflicts with the same IP or
// 0.0.0.0. Ports within the pod itself are not checked against each other.
type NodePorts struct{}

// NewNodePorts returns the host port admitter. It needs no node.
func NewNodePorts() *NodePorts { return &NodePorts{} }

// Admit implements nodekit.Admitter.
func (a *NodePorts) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	wants := false
	forEachHostPort(req.Pod, func(v1.ContainerPort) { wants = true })
	if !wants {
		return nodekit.Admitted
	}

	used := hostPorts{
		exact: make(map[hostPort]struct{}),
		any:   make(map[protoPort]struct{}),
	}
	otherActivePods(req, func(p *v1.Pod) { forEachHostPort(p, used.add) })

	conflict := false
	forEachHostPort(req.Pod, func(p v1.ContainerPort) {
		if !conflict && used.conflicts(p) {
			conflict = true
		}
	})
	if conflict {
		return predicateFailure(ReasonNodePorts, descNodePorts)
	}
	return nodekit.Admitted
}

// forEachHostPort calls fn for every port with a hostPort that pod holds for
// its whole life: sidecars' first, then regular containers'.
func forEachHostPort(pod *v1.Pod, fn func(v1.ContainerPort)) {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
			continue
		}
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				fn(p)
			}
		}
	}
	for i := range pod.Spec.Containers {
		for _, p := range pod.Spec.Containers[i].Ports {
			if p.HostPort > 0 {
				fn(p)
			}
		}
	}
}

const anyIP = "0.0.0.0"

type protoPort struct {
	protocol string
	port     int32
}

type hostPort struct {
	ip string
	protoPort
}

// hostPorts is the set of host ports in use, indexed both by exact triple
// and by (protocol, port) for the 0.0.0.0 lookups.
type hostPorts struct {
	exact map[hostPort]struct{}
	any   map[protoPort]struct{}
}

func keyOf(p v1.ContainerPort) hostPort {
	k := hostPort{ip: p.HostIP, protoPort: protoPort{protocol: string(p.Protocol), port: p.HostPort}}
	if k.ip == "" {
		k.ip = anyIP
	}
	if k.protocol == "" {
		k.protocol = string(v1.ProtocolTCP)
	}
	return k
}

func (h hostPorts) add(p v1.ContainerPort) {
	k := keyOf(p)
	h.exact[k] = struct{}{}
	h.any[k.protoPort] = struct{}{}
}

func (h hostPorts) conflicts(p v1.ContainerPort) bool {
	k := keyOf(p)
	if k.ip == anyIP {
		_, taken := h.any[k.protoPort]
		return taken
	}
	if _, taken := h.exact[k]; taken {
		return true
	}
	_, taken := h.exact[hostPort{ip: anyIP, protoPort: k.protoPort}]
	return taken
}
