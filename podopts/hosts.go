package podopts

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/fsutil"
)

const (
	// EtcHostsPath is where the managed hosts file is mounted in containers.
	EtcHostsPath = "/etc/hosts"
	// HostsMountName names the hosts-file mount, as upstream.
	HostsMountName = "k8s-managed-etc-hosts"

	hostsHeader            = "# Kubernetes-managed hosts file.\n"
	hostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"

	maxHostnameLen = 63
	maxFQDNLen     = 64
)

// HostnameAndDomain returns the pod's hostname and DNS domain as upstream:
// spec.hostnameOverride if set (a DNS subdomain, no domain); else
// spec.hostname (a DNS label) or the pod name, cut to 63 characters without
// a trailing '-' or '.'; the domain is SUBDOMAIN.NAMESPACE.svc.CLUSTERDOMAIN
// when spec.subdomain is set. With setHostnameAsFQDN, hostname.domain must
// fit the kernel's 64 characters, or it is an error.
func HostnameAndDomain(pod *v1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		hostname, err = truncateHostname(pod.Name, *o)
		return hostname, "", err
	}

	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", h, strings.Join(msgs, ";"))
		}
		hostname = h
	}
	if hostname, err = truncateHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if sub := pod.Spec.Subdomain; sub != "" {
		if msgs := validation.IsDNS1123Label(sub); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", sub, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", sub, pod.Namespace, clusterDomain)
	}
	if _, err := kernelHostname(pod, hostname, domain); err != nil {
		return "", "", err
	}
	return hostname, domain, nil
}

// kernelHostname is the name set in the pod's UTS namespace: hostname, or
// hostname.domain with setHostnameAsFQDN.
func kernelHostname(pod *v1.Pod, hostname, domain string) (string, error) {
	if domain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return hostname, nil
	}
	fqdn := hostname + "." + domain
	if len(fqdn) > maxFQDNLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxFQDNLen, len(fqdn))
	}
	return fqdn, nil
}

func truncateHostname(podName, hostname string) (string, error) {
	if len(hostname) <= maxHostnameLen {
		return hostname, nil
	}
	t := strings.TrimRight(hostname[:maxHostnameLen], "-.")
	if t == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return t, nil
}

// HostsFileContent returns the managed /etc/hosts of a pod on the pod
// network: the header, localhost and IPv6 entries, one line per pod IP
// naming the FQDN (when domain is set) and the hostname, then the
// hostAliases section.
func HostsFileContent(podIPs []string, hostname, domain string, hostAliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(hostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	writeHostAliases(&b, hostAliases)
	return b.Bytes()
}

// NodeHostsFileContent returns the /etc/hosts of a hostNetwork pod: a header,
// the node's hosts file as given, then the hostAliases section.
func NodeHostsFileContent(nodeHosts []byte, hostAliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(hostsHeaderHostNetwork)
	b.Write(nodeHosts)
	writeHostAliases(&b, hostAliases)
	return b.Bytes()
}

func writeHostAliases(b *bytes.Buffer, aliases []v1.HostAlias) {
	if len(aliases) == 0 {
		return
	}
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
}

// EnsureHostsFile makes path hold content, mode 0644, creating its directory
// (0750) if needed. A file that already holds content with that mode is left
// alone, so containers that mounted it keep sharing it; otherwise the new
// content is written to a temporary file beside it and renamed over it, so no
// reader sees a partial file. It is idempotent. The file is not synced to
// disk (upstream writes it without a sync too): after a crash it is read
// again and rewritten if it lost its content, so an fsync per pod start
// would buy nothing.
func EnsureHostsFile(path string, content []byte) error {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == 0o644 {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
			return nil
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create hosts file directory: %w", err)
	}
	if err := fsutil.WriteFileAtomic(path, content, 0o644, fsutil.NoSync(true)); err != nil {
		return fmt.Errorf("write hosts file: %w", err)
	}
	return nil
}

// HostsMount mounts the hosts file at path on /etc/hosts, read-write and
// relabeled for the container (where SELinux is enabled) as upstream.
func HostsMount(path string) nodekit.Mount {
	return nodekit.Mount{Name: HostsMountName, ContainerPath: EtcHostsPath, HostPath: path, SELinuxRelabel: true}
}

// shouldMountHostsFile reports whether a container gets the managed hosts
// file: the pod has IPs or uses the host network, and the container does
// not mount something on /etc/hosts itself.
func shouldMountHostsFile(pod *v1.Pod, c *v1.Container, podIPs []string, mounts []nodekit.Mount) bool {
	if len(podIPs) == 0 && !pod.Spec.HostNetwork {
		return false
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == EtcHostsPath {
			return false
		}
	}
	for _, m := range mounts {
		if m.ContainerPath == EtcHostsPath {
			return false
		}
	}
	return true
}
