package podopts

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// Limits the API server enforces on a pod's dnsConfig and the kubelet applies
// to the composed resolv.conf.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	// maxSearchPathLen is the longest search domain kept (some resolvers
	// abort on longer ones).
	maxSearchPathLen = 253
	// maxResolvConfSize bounds how much of the host resolv.conf is read.
	maxResolvConfSize = 10 << 20
	// clusterDNSOption is the one option of every cluster-DNS pod.
	clusterDNSOption = "ndots:5"
)

// DNSConfigurer computes a pod's resolv.conf from its dnsPolicy and
// dnsConfig, the cluster DNS settings and the node's resolv.conf, as the
// upstream kubelet does. Set the fields before first use and do not change
// them afterwards; it is safe for concurrent use.
type DNSConfigurer struct {
	// ClusterDNS are the cluster DNS server IPs (KubeletConfiguration
	// clusterDNS). Empty makes ClusterFirst pods fall back to Default.
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain, e.g. cluster.local.
	ClusterDomain string
	// ResolvConf is the host file that Default pods copy and ClusterFirst
	// pods take search paths from; "" means none (Default pods then get a
	// local-only resolver).
	ResolvConf string
	// NodeIPs pick the loopback servers ("127.0.0.1" or "::1") used when
	// ResolvConf is "".
	NodeIPs []string
	// ReadFile reads ResolvConf; nil reads the file from disk (at most 10 MiB).
	ReadFile func(name string) ([]byte, error)
	// Events receives MissingClusterDNS and DNSConfigForming warnings about
	// the pod. Nil discards them.
	Events EventRecorder
}

// PodDNS returns the resolv.conf content for pod:
//
//   - ClusterFirst (and ClusterFirstWithHostNet): the cluster DNS servers,
//     the namespace/svc/cluster search paths followed by the host's, and
//     ndots:5. A hostNetwork ClusterFirst pod is treated as Default. Without
//     ClusterDNS the pod falls back to Default and a MissingClusterDNS
//     warning is recorded.
//   - Default: the host's resolv.conf.
//   - None: nothing but spec.dnsConfig.
//
// spec.dnsConfig is then appended (duplicates dropped; its options override
// same-named ones) and the result cut to the limits, with a DNSConfigForming
// warning when anything is dropped. An unknown policy is treated as
// ClusterFirst, an empty one as the API default. PodDNS reads ResolvConf; an
// unreadable file is an error. The result belongs to the caller.
func (d *DNSConfigurer) PodDNS(ctx context.Context, pod *v1.Pod) (*nodekit.DNSConfig, error) {
	logger := klog.FromContext(ctx)
	policy := pod.Spec.DNSPolicy
	switch policy {
	case "":
		policy = v1.DNSClusterFirst
	case v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet, v1.DNSDefault, v1.DNSNone:
	default:
		logger.Error(nil, "Invalid DNSPolicy, falling back to ClusterFirst", "pod", klog.KObj(pod), "dnsPolicy", policy)
		policy = v1.DNSClusterFirstWithHostNet // cluster DNS even on the host network, as upstream
	}
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}

	cfg := &nodekit.DNSConfig{}
	if policy != v1.DNSNone {
		host, err := d.hostConfig()
		if err != nil {
			return nil, err
		}
		cfg = host
	}

	if policy == v1.DNSClusterFirst || policy == v1.DNSClusterFirstWithHostNet {
		servers, err := d.clusterServers()
		if err != nil {
			return nil, err
		}
		if len(servers) > 0 {
			cfg.Servers = servers
			cfg.Searches = d.clusterSearches(pod.Namespace, cfg.Searches)
			cfg.Options = []string{clusterDNSOption}
		} else {
			msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", v1.DNSClusterFirst, v1.DNSDefault)
			logger.Info("Missing cluster DNS", "pod", klog.KObj(pod), "message", msg)
			d.event(pod, "MissingClusterDNS", fmt.Sprintf("pod: %q. %s", fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID), msg))
			policy = v1.DNSDefault
		}
	}
	if policy == v1.DNSDefault && d.ResolvConf == "" {
		// No host file: resolve on the local machine only.
		cfg.Servers = nil
		for _, ip := range d.NodeIPs {
			if a, err := netip.ParseAddr(ip); err == nil && !a.Unmap().Is4() {
				cfg.Servers = append(cfg.Servers, "::1")
			} else {
				cfg.Servers = append(cfg.Servers, "127.0.0.1")
			}
		}
		if len(cfg.Servers) == 0 {
			cfg.Servers = []string{"127.0.0.1"}
		}
		cfg.Searches = []string{"."}
	}

	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = dedupe(append(cfg.Servers, dc.Nameservers...))
		cfg.Searches = dedupe(append(cfg.Searches, dc.Searches...))
		cfg.Options = mergeOptions(cfg.Options, dc.Options)
	}
	d.fitLimits(ctx, pod, cfg)
	return cfg, nil
}

// hostConfig reads and parses ResolvConf; "" yields an empty config.
func (d *DNSConfigurer) hostConfig() (*nodekit.DNSConfig, error) {
	if d.ResolvConf == "" {
		return &nodekit.DNSConfig{}, nil
	}
	read := d.ReadFile
	if read == nil {
		read = readFileAtMost
	}
	data, err := read(d.ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("read resolv.conf: %w", err)
	}
	cfg, err := parseResolvConf(data)
	if err != nil {
		return nil, fmt.Errorf("Encountered error while parsing resolv conf file. Error: %w", err) //nolint:staticcheck // upstream's wording
	}
	return cfg, nil
}

func (d *DNSConfigurer) clusterServers() ([]string, error) {
	out := make([]string, 0, len(d.ClusterDNS))
	for _, s := range d.ClusterDNS {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("podopts: invalid ClusterDNS IP %q", s)
		}
		out = append(out, a.Unmap().String())
	}
	return out, nil
}

// clusterSearches puts NAMESPACE.svc.DOMAIN, svc.DOMAIN and DOMAIN before the
// host's search paths.
func (d *DNSConfigurer) clusterSearches(ns string, host []string) []string {
	if d.ClusterDomain == "" {
		return host
	}
	s := []string{ns + ".svc." + d.ClusterDomain, "svc." + d.ClusterDomain, d.ClusterDomain}
	return dedupe(append(s, host...))
}

// fitLimits cuts servers to 3 and search paths to 32, drops search paths
// longer than 253 characters and then cuts from the end until the search
// line fits 2048 characters, reporting what it did.
func (d *DNSConfigurer) fitLimits(ctx context.Context, pod *v1.Pod, cfg *nodekit.DNSConfig) {
	logger := klog.FromContext(ctx)
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		msg := "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(cfg.Servers, " ")
		logger.Info("Nameserver limits exceeded", "pod", klog.KObj(pod), "message", msg)
		d.event(pod, "DNSConfigForming", msg)
	}

	cut := false
	s := cfg.Searches
	if len(s) > maxDNSSearchPaths {
		s, cut = s[:maxDNSSearchPaths], true
	}
	kept := s[:0:0]
	for _, p := range s {
		if len(p) > maxSearchPathLen {
			cut = true
			continue
		}
		kept = append(kept, p)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > maxDNSSearchListChars {
		kept, cut = kept[:len(kept)-1], true
	}
	if cut {
		msg := "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(kept, " ")
		logger.Info("Search line limits exceeded", "pod", klog.KObj(pod), "message", msg)
		d.event(pod, "DNSConfigForming", msg)
	}
	if cfg.Searches != nil {
		cfg.Searches = kept
	}
}

func (d *DNSConfigurer) event(pod *v1.Pod, reason, msg string) {
	if d.Events != nil {
		d.Events.Eventf(pod, v1.EventTypeWarning, reason, "%s", msg)
	}
}

// parseResolvConf parses resolv.conf content as the kubelet does: nameserver
// lines accumulate, the last search line wins (trailing dots dropped, "."
// ignored), options accumulate with a later option replacing a same-named
// one. Comments start with '#'. A nameserver line without an address is an
// error, reported after the whole file is parsed.
func parseResolvConf(data []byte) (*nodekit.DNSConfig, error) {
	cfg := &nodekit.DNSConfig{}
	var errs []string
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				errs = append(errs, "nameserver list is empty ")
				continue
			}
			cfg.Servers = append(cfg.Servers, f[1])
		case "search":
			cfg.Searches = []string{}
			for _, s := range f[1:] {
				if s != "." {
					cfg.Searches = append(cfg.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			for _, o := range f[1:] {
				cfg.Options = setOption(cfg.Options, o)
			}
		}
	}
	switch len(errs) {
	case 0:
		return cfg, nil
	case 1:
		return cfg, fmt.Errorf("%s", errs[0])
	}
	return cfg, fmt.Errorf("[%s]", strings.Join(errs, ", "))
}

// setOption adds opt ("name" or "name:value"), replacing a same-named one in
// place.
func setOption(opts []string, opt string) []string {
	name, _, _ := strings.Cut(opt, ":")
	for i, o := range opts {
		if n, _, _ := strings.Cut(o, ":"); n == name {
			opts[i] = opt
			return opts
		}
	}
	return append(opts, opt)
}

// mergeOptions lays the pod's dnsConfig options over the base ones.
func mergeOptions(base []string, pod []v1.PodDNSConfigOption) []string {
	out := append([]string(nil), base...)
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil && *o.Value != "" {
			opt += ":" + *o.Value
		}
		out = setOption(out, opt)
	}
	return out
}

// dedupe drops repeated strings, keeping the first.
func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := in[:0:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func readFileAtMost(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxResolvConfSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxResolvConfSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxResolvConfSize)
	}
	return data, nil
}
