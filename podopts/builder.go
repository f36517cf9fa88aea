package podopts

import (
	"context"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// Builder assembles a pod's node-side settings: the container options
// (environment, volume and hosts-file mounts, container directory) and the
// sandbox's hostname, domain and DNS. Set the fields before first use; it is
// safe for concurrent use.
type Builder struct {
	// Env resolves environments; nil uses a zero Resolver (no ConfigMaps,
	// Secrets or services).
	Env *Resolver
	// DNS computes resolv.conf; its ClusterDomain also names the pods'
	// subdomains. Nil leaves DNS to the runtime and the cluster domain empty.
	DNS *DNSConfigurer
	// NodeHostsFile is the node's hosts file, copied for hostNetwork pods;
	// "" means /etc/hosts.
	NodeHostsFile string
	// ReadFile reads NodeHostsFile; nil reads it from disk.
	ReadFile func(name string) ([]byte, error)
	// VolumeMounts returns the container's volume mounts (the volume
	// manager's job); nil means none. Its error fails the container.
	VolumeMounts func(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]nodekit.Mount, error)
	// VolumeDevices returns the container's raw block devices
	// (volumeDevices; the volume manager's job), added to the options'
	// Devices; nil means none. Its error fails the container.
	VolumeDevices func(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]nodekit.Device, error)
}

// Options returns the ContainerOptionsFunc for a Runtime. podDir gives a
// pod's directory on the node (ROOT/pods/UID); the pod's hosts file is
// written there as etc-hosts before the options are returned, and
// PodContainerDir is its containers/ subdirectory. A nil podDir, or one that
// returns "", means neither. The hosts file is mounted when the pod has IPs
// or uses the host network, unless the container mounts /etc/hosts itself.
//
// The returned function blocks on the Resolver's getters, VolumeMounts and
// the file system; its errors carry upstream's messages for the
// CreateContainerConfigError status.
func (b *Builder) Options(podDir func(*v1.Pod) string) nodekit.ContainerOptionsFunc {
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*nodekit.ContainerOptions, error) {
		hostname, domain, err := HostnameAndDomain(pod, b.clusterDomain())
		if err != nil {
			return nil, err
		}
		env := b.Env
		if env == nil {
			env = &Resolver{}
		}
		envs, err := env.Envs(ctx, pod, c, podIPs)
		if err != nil {
			return nil, err
		}
		opts := &nodekit.ContainerOptions{Envs: envs}
		if b.VolumeMounts != nil {
			if opts.Mounts, err = b.VolumeMounts(ctx, pod, c); err != nil {
				return nil, err
			}
		}
		if b.VolumeDevices != nil {
			devs, err := b.VolumeDevices(ctx, pod, c)
			if err != nil {
				return nil, err
			}
			opts.Devices = append(opts.Devices, devs...)
		}
		dir := ""
		if podDir != nil {
			dir = podDir(pod)
		}
		if dir == "" {
			return opts, nil
		}
		opts.PodContainerDir = filepath.Join(dir, "containers")
		if !shouldMountHostsFile(pod, c, podIPs, opts.Mounts) {
			return opts, nil
		}
		content := HostsFileContent(podIPs, hostname, domain, pod.Spec.HostAliases)
		if pod.Spec.HostNetwork {
			node, err := b.readNodeHosts()
			if err != nil {
				return nil, err
			}
			content = NodeHostsFileContent(node, pod.Spec.HostAliases)
		}
		path := filepath.Join(dir, "etc-hosts")
		if err := EnsureHostsFile(path, content); err != nil {
			return nil, err
		}
		opts.Mounts = append(opts.Mounts, HostsMount(path))
		return opts, nil
	}
}

// Sandbox returns the hostname, domain and DNS settings of pod's sandbox;
// the caller fills in the cgroup parent and runtime handler. With
// setHostnameAsFQDN the hostname is the FQDN. It reads the host resolv.conf
// (see DNSConfigurer.PodDNS).
func (b *Builder) Sandbox(ctx context.Context, pod *v1.Pod) (nodekit.SandboxOptions, error) {
	hostname, domain, err := HostnameAndDomain(pod, b.clusterDomain())
	if err != nil {
		return nodekit.SandboxOptions{}, err
	}
	kernel, err := kernelHostname(pod, hostname, domain)
	if err != nil {
		return nodekit.SandboxOptions{}, err
	}
	opts := nodekit.SandboxOptions{Hostname: kernel, Domain: domain}
	if b.DNS != nil {
		if opts.DNS, err = b.DNS.PodDNS(ctx, pod); err != nil {
			return nodekit.SandboxOptions{}, err
		}
	}
	return opts, nil
}

func (b *Builder) clusterDomain() string {
	if b.DNS == nil {
		return ""
	}
	return b.DNS.ClusterDomain
}

func (b *Builder) readNodeHosts() ([]byte, error) {
	name := b.NodeHostsFile
	if name == "" {
		name = EtcHostsPath
	}
	read := b.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	return read(name)
}
