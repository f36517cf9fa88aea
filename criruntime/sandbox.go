package criruntime

import (
	"context"
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
)

// maxHostnameLen is the longest hostname the kernel takes.
const maxHostnameLen = 63

// podHostname returns the hostname a pod sees, as upstream: the options',
// else the spec's hostname, else the pod name cut to 63 characters.
func podHostname(pod *v1.Pod, opts nodekit.SandboxOptions) string {
	host := opts.Hostname
	if host == "" {
		host = pod.Spec.Hostname
		if host == "" {
			host = pod.Name
		}
		if len(host) > maxHostnameLen {
			host = strings.TrimRight(host[:maxHostnameLen], "-.")
		}
	}
	return host
}

// sandboxConfig builds the CRI sandbox config for a pod.
func (r *Runtime) sandboxConfig(pod *v1.Pod, attempt uint32, opts nodekit.SandboxOptions) *runtimeapi.PodSandboxConfig {
	host := podHostname(pod, opts)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		LogDirectory: r.podLogDir(pod),
		Labels:       podLabels(pod),
		Annotations:  copyMap(pod.Annotations),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    opts.CgroupParent,
			SecurityContext: sandboxSecurityContext(pod),
			Sysctls:         sandboxSysctls(pod),
		},
	}
	if !pod.Spec.HostNetwork {
		// The kernel hostname stays short; the FQDN (host.domain) belongs in
		// the pod's /etc/hosts, which the caller mounts.
		cfg.Hostname = host
	}
	if opts.DNS != nil {
		cfg.DnsConfig = &runtimeapi.DNSConfig{Servers: opts.DNS.Servers, Searches: opts.DNS.Searches, Options: opts.DNS.Options}
	}
	for _, c := range allContainers(pod) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      protocolOf(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	return cfg
}

func protocolOf(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func sandboxSecurityContext(pod *v1.Pod) *runtimeapi.LinuxSandboxSecurityContext {
	sc := &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: namespaceOptions(pod)}
	psc := pod.Spec.SecurityContext
	if psc != nil {
		if psc.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
		if psc.FSGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
		}
		sc.Seccomp = seccompProfile(psc.SeccompProfile)
	}
	for _, c := range allContainers(pod) {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			sc.Privileged = true
		}
	}
	return sc
}

func sandboxSysctls(pod *v1.Pod) map[string]string {
	if pod.Spec.SecurityContext == nil || len(pod.Spec.SecurityContext.Sysctls) == 0 {
		return nil
	}
	m := make(map[string]string, len(pod.Spec.SecurityContext.Sysctls))
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		m[s.Name] = s.Value
	}
	return m
}

// createSandbox runs a new sandbox for the pod and returns its ID and IPs.
func (r *Runtime) createSandbox(ctx context.Context, pod *v1.Pod, cfg *runtimeapi.PodSandboxConfig, handler string) (string, []string, error) {
	fail := func(reason nodekit.Reason, err error) error {
		msg := fmt.Sprintf("Failed to create pod sandbox: %v", err)
		r.events.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "%s", msg)
		return &nodekit.ActionError{Action: nodekit.ActionCreatePodSandbox, Target: pod.Name, Reason: reason, Message: msg, Err: err}
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", nil, fail(nodekit.ErrConfigPodSandbox, fmt.Errorf("create pod log directory: %w", err))
	}
	id, err := r.rs.RunPodSandbox(ctx, cfg, handler)
	if err != nil {
		return "", nil, fail(nodekit.ErrCreatePodSandbox, err)
	}
	st, err := r.rs.PodSandboxStatus(ctx, id, false)
	if err != nil {
		return id, nil, fail(nodekit.ErrCreatePodSandbox, fmt.Errorf("status of new sandbox %s: %w", id, err))
	}
	return id, sandboxIPs(st.GetStatus()), nil
}

func sandboxIPs(st *runtimeapi.PodSandboxStatus) []string {
	n := st.GetNetwork()
	if n == nil || n.Ip == "" {
		return nil
	}
	ips := []string{n.Ip}
	for _, ip := range n.AdditionalIps {
		ips = append(ips, ip.Ip)
	}
	return ips
}

func allContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
