package admission

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"

	"github.com/nodekit/nodekit"
)

// ReasonSysctlForbidden is the rejection reason for a pod asking for a
// sysctl the node does not allow, as upstream.
const ReasonSysctlForbidden = "SysctlForbidden"

// safeSysctls are upstream's safe sysctls: namespaced, isolated between
// pods, allowed without configuration. Some are namespaced only from a
// kernel version on.
var safeSysctls = []struct{ name, kernel string }{
	{"kernel.shm_rmid_forced", ""},
	{"net.ipv4.ip_local_port_range", ""},
	{"net.ipv4.tcp_syncookies", ""},
	{"net.ipv4.ping_group_range", ""},
	{"net.ipv4.ip_unprivileged_port_start", ""},
	{"net.ipv4.ip_local_reserved_ports", "3.16"},
	{"net.ipv4.tcp_keepalive_time", "4.5"},
	{"net.ipv4.tcp_fin_timeout", "4.6"},
	{"net.ipv4.tcp_keepalive_intvl", "4.5"},
	{"net.ipv4.tcp_keepalive_probes", "4.5"},
	{"net.ipv4.tcp_rmem", "4.15"},
	{"net.ipv4.tcp_wmem", "4.15"},
	{"net.ipv4.tcp_slow_start_after_idle", "4.15"},
	{"net.ipv4.tcp_notsent_lowat", "4.6"},
}

// SafeSysctls returns the safe sysctls for a kernel version ("6.1.0-13",
// as uname -r prints it). An unparsable version keeps only those safe on
// every kernel.
func SafeSysctls(kernel string) []string {
	kv, err := version.ParseGeneric(kernel)
	var out []string
	for _, s := range safeSysctls {
		if s.kernel != "" && (err != nil || kv.LessThan(version.MustParseGeneric(s.kernel))) {
			continue
		}
		out = append(out, s.name)
	}
	return out
}

// sysctlPattern is upstream's pattern for allowedUnsafeSysctls entries: a
// sysctl name, optionally ending in '*'.
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

// Sysctls admits pods whose sysctls are allowed: the safe ones and the
// configured unsafe ones (allowedUnsafeSysctls), never one of a namespace
// the pod shares with the host.
type Sysctls struct {
	// exact maps each allowed sysctl name to its kernel namespace.
	exact map[string]utilsysctl.Namespace
	// families are the allowed name prefixes (patterns ending in '*'),
	// longest first, so the most specific family decides.
	families []sysctlFamily
}

// sysctlFamily is every sysctl whose name starts with prefix.
type sysctlFamily struct {
	prefix string
	ns     utilsysctl.Namespace
}

// NewSysctls builds the allowlist from patterns (sysctl names or prefixes
// ending in '*'); typically SafeSysctls(kernel) plus allowedUnsafeSysctls.
// A pattern that is malformed or names a sysctl not known to be
// namespaced is an error naming it.
func NewSysctls(patterns []string) (*Sysctls, error) {
	s := &Sysctls{exact: map[string]utilsysctl.Namespace{}}
	for _, p := range patterns {
		name, family, ns, err := classifySysctlPattern(p)
		if err != nil {
			return nil, err
		}
		if family {
			s.families = append(s.families, sysctlFamily{prefix: name, ns: ns})
			continue
		}
		s.exact[name] = ns
	}
	slices.SortStableFunc(s.families, func(a, b sysctlFamily) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
	return s, nil
}

// classifySysctlPattern checks one allowlist entry and finds the kernel
// namespace of what it names. The name comes back normalized (dots, not
// slashes) and, for a family (a trailing '*'), without the '*'. Only
// namespaced sysctls can be allowed: one that is global to the node would
// let a pod change every other pod's setting.
func classifySysctlPattern(p string) (name string, family bool, ns utilsysctl.Namespace, err error) {
	if len(p) > 253 || !sysctlPattern.MatchString(p) {
		return "", false, "", fmt.Errorf("sysctl %q must have at most 253 characters and match regex %s", p, sysctlPattern)
	}
	ns, name, family = utilsysctl.GetNamespace(p)
	if ns == utilsysctl.UnknownNamespace {
		return "", false, "", fmt.Errorf("the sysctls %q are not known to be namespaced", name)
	}
	return name, family, ns, nil
}

// Admit implements nodekit.Admitter.
func (s *Sysctls) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	sc := req.Pod.Spec.SecurityContext
	if sc == nil || len(sc.Sysctls) == 0 {
		return nodekit.Admitted
	}
	for _, sysctl := range sc.Sysctls {
		if err := s.check(req.Pod, sysctl.Name); err != nil {
			return nodekit.Decision{Reason: ReasonSysctlForbidden, Message: fmt.Sprintf("forbidden sysctl: %v", err)}
		}
	}
	return nodekit.Admitted
}

// check says why pod may not set the sysctl name, or nil if it may.
func (s *Sysctls) check(pod *v1.Pod, name string) error {
	name = utilsysctl.NormalizeName(name)
	ns, allowed := s.namespaceOf(name)
	if !allowed {
		return fmt.Errorf("%q not allowlisted", name)
	}
	if sharesWithHost(pod, ns) {
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}

// namespaceOf finds a normalized sysctl name on the allowlist: an exact
// entry first, then the longest family it belongs to.
func (s *Sysctls) namespaceOf(name string) (utilsysctl.Namespace, bool) {
	if ns, ok := s.exact[name]; ok {
		return ns, true
	}
	for _, f := range s.families {
		if strings.HasPrefix(name, f.prefix) {
			return f.ns, true
		}
	}
	return utilsysctl.UnknownNamespace, false
}

// sharesWithHost reports whether pod runs in the host's namespace of kind
// ns, where setting a sysctl would change the node's own value. An unset
// hostUsers means the host user namespace (the API default).
func sharesWithHost(pod *v1.Pod, ns utilsysctl.Namespace) bool {
	switch ns {
	case utilsysctl.IPCNamespace:
		return pod.Spec.HostIPC
	case utilsysctl.NetNamespace:
		return pod.Spec.HostNetwork
	case utilsysctl.UserNamespace:
		return pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
	}
	return false
}
