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

// sandboxConfig builds the CRI sandbox config for a pod. It fails when the
// pod's security settings cannot be given to the runtime (user namespaces
// the handler does not support, an unknown supplementalGroupsPolicy).
func (r *Runtime) sandboxConfig(ctx context.Context, pod *v1.Pod, attempt uint32, opts nodekit.SandboxOptions) (*runtimeapi.PodSandboxConfig, error) {
	ns, err := r.podNamespaces(ctx, pod, opts.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	sc, err := sandboxSecurityContext(pod, ns)
	if err != nil {
		return nil, err
	}
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
			SecurityContext: sc,
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
	return cfg, nil
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

// sandboxSecurityContext is the sandbox's security context as upstream:
// always the runtime's default seccomp profile (so a pod's own profile can
// be strict without breaking the pause process), privileged when any
// container is, the pod's user, groups and SELinux options.
func sandboxSecurityContext(pod *v1.Pod, ns *runtimeapi.NamespaceOption) (*runtimeapi.LinuxSandboxSecurityContext, error) {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: ns,
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	for _, c := range allContainers(pod) {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			sc.Privileged = true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if c := pod.Spec.EphemeralContainers[i].SecurityContext; c != nil && c.Privileged != nil && *c.Privileged {
			sc.Privileged = true
		}
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return sc, nil
	}
	if psc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
	}
	if psc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
	}
	groups, policy, err := supplementalGroups(psc)
	if err != nil {
		return nil, err
	}
	sc.SupplementalGroups, sc.SupplementalGroupsPolicy = groups, policy
	sc.SelinuxOptions = selinuxOptions(psc.SELinuxOptions)
	return sc, nil
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

// sandboxConfigError reports a sandbox config that cannot be built as
// upstream does: when a sandbox was to be created, as a failed creation
// (event FailedCreatePodSandBox, "Failed to create pod sandbox: ..."),
// else as a config error for the containers about to start.
func (r *Runtime) sandboxConfigError(pod *v1.Pod, creating bool, err error) error {
	if creating {
		msg := fmt.Sprintf("Failed to create pod sandbox: %v", err)
		r.events.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "%s", msg)
		return &nodekit.ActionError{Action: nodekit.ActionCreatePodSandbox, Target: pod.Name, Reason: nodekit.ErrCreatePodSandbox, Message: msg, Err: err}
	}
	msg := fmt.Sprintf("GeneratePodSandboxConfig for pod %q failed: %v", pod.Namespace+"/"+pod.Name, err)
	return &nodekit.ActionError{Action: nodekit.ActionCreatePodSandbox, Target: pod.Name, Reason: nodekit.ErrConfigPodSandbox, Message: msg, Err: err}
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
	leave, err := r.sandboxes.enter(ctx)
	if err != nil {
		return "", nil, fail(nodekit.ErrCreatePodSandbox, err)
	}
	id, err := r.rs.RunPodSandbox(ctx, cfg, handler)
	leave()
	r.metrics.StartedPod(err)
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
