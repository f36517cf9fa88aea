package criruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/internal/apparmor"
)

// The /proc and /sys paths upstream hides from containers (masked) or makes
// read-only, unless procMount is Unmasked. The runtime drops them for
// privileged containers.
var (
	baseMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// securityPolicy is the node's side of the security mapping.
type securityPolicy struct {
	// seccompRoot is where Localhost seccomp profiles live (ROOT-DIR/seccomp).
	seccompRoot string
	// seccompDefault makes RuntimeDefault the profile of a container that
	// names none (KubeletConfiguration seccompDefault).
	seccompDefault bool
	// maskedPaths are the default masked paths on this host.
	maskedPaths []string
}

// hostMaskedPaths is baseMaskedPaths plus each CPU's thermal_throttle
// directory that exists on this host, as upstream.
func hostMaskedPaths() []string {
	out := append([]string(nil), baseMaskedPaths...)
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// effectiveSecurityContext is upstream's merge of the pod's and the
// container's security settings: seLinuxOptions, runAsUser, runAsGroup and
// runAsNonRoot come from the pod unless the container sets them; the other
// fields exist on the container only.
func effectiveSecurityContext(pod *v1.Pod, c *v1.Container) *v1.SecurityContext {
	eff := &v1.SecurityContext{}
	if c.SecurityContext != nil {
		eff = c.SecurityContext.DeepCopy()
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if eff.SELinuxOptions == nil && psc.SELinuxOptions != nil {
			eff.SELinuxOptions = psc.SELinuxOptions.DeepCopy()
		}
		if eff.RunAsUser == nil {
			eff.RunAsUser = psc.RunAsUser
		}
		if eff.RunAsGroup == nil {
			eff.RunAsGroup = psc.RunAsGroup
		}
		if eff.RunAsNonRoot == nil {
			eff.RunAsNonRoot = psc.RunAsNonRoot
		}
	}
	return eff
}

// containerSecurityContext builds a container's CRI security context from
// the merged settings, with the pod's namespaces ns (those of its sandbox),
// and checks runAsNonRoot against the image's user, with upstream's
// messages.
func containerSecurityContext(pod *v1.Pod, c *v1.Container, img *runtimeapi.Image, ns *runtimeapi.NamespaceOption, pol securityPolicy) (*runtimeapi.LinuxContainerSecurityContext, error) {
	eff := effectiveSecurityContext(pod, c)
	sc := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: ns,
		Privileged:       eff.Privileged != nil && *eff.Privileged,
		ReadonlyRootfs:   eff.ReadOnlyRootFilesystem != nil && *eff.ReadOnlyRootFilesystem,
		// As upstream: only an explicit allowPrivilegeEscalation: false
		// sets no_new_privs (validation forbids it with privileged or
		// CAP_SYS_ADMIN).
		NoNewPrivs:     eff.AllowPrivilegeEscalation != nil && !*eff.AllowPrivilegeEscalation,
		SelinuxOptions: selinuxOptions(eff.SELinuxOptions),
	}
	if eff.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *eff.RunAsUser}
	}
	if eff.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *eff.RunAsGroup}
	}
	if eff.RunAsNonRoot != nil && *eff.RunAsNonRoot {
		if err := verifyNonRoot(pod, c, eff.RunAsUser, img); err != nil {
			return nil, err
		}
	}
	if eff.Capabilities != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, a := range eff.Capabilities.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range eff.Capabilities.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
		}
	}
	groups, policy, err := supplementalGroups(pod.Spec.SecurityContext)
	if err != nil {
		return nil, err
	}
	sc.SupplementalGroups, sc.SupplementalGroupsPolicy = groups, policy
	if eff.ProcMount != nil && *eff.ProcMount == v1.UnmaskedProcMount {
		sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
	} else {
		sc.MaskedPaths, sc.ReadonlyPaths = pol.maskedPaths, defaultReadonlyPaths
	}
	if sc.Seccomp, err = seccompFor(pod.Spec.SecurityContext, c.SecurityContext, pol); err != nil {
		return nil, err
	}
	if sc.Apparmor, sc.ApparmorProfile, err = appArmorFor(pod, c); err != nil {
		return nil, err
	}
	return sc, nil
}

// supplementalGroups lists the pod's extra groups in upstream's order
// (fsGroup first, then supplementalGroups; the sandbox's list the same) and
// its supplementalGroupsPolicy.
func supplementalGroups(psc *v1.PodSecurityContext) ([]int64, runtimeapi.SupplementalGroupsPolicy, error) {
	if psc == nil {
		return nil, runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	var groups []int64
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	groups = append(groups, psc.SupplementalGroups...)
	policy := runtimeapi.SupplementalGroupsPolicy_Merge
	if psc.SupplementalGroupsPolicy != nil {
		v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*psc.SupplementalGroupsPolicy)]
		if !ok {
			return nil, 0, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *psc.SupplementalGroupsPolicy)
		}
		policy = runtimeapi.SupplementalGroupsPolicy(v)
	}
	return groups, policy, nil
}

func selinuxOptions(o *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

func verifyNonRoot(pod *v1.Pod, c *v1.Container, runAsUser *int64, img *runtimeapi.Image) error {
	if runAsUser != nil {
		if *runAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
		}
		return nil
	}
	if img.GetUid() != nil {
		if img.GetUid().Value == 0 {
			return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
		}
		return nil
	}
	if name := img.GetUsername(); name != "" {
		if _, err := strconv.ParseInt(name, 10, 64); err != nil {
			return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", name, pod.Namespace+"/"+pod.Name, c.Name)
		}
		return nil
	}
	return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
}

// seccompFor picks the container's seccomp profile as upstream: the
// container's field, else the pod's, else RuntimeDefault with
// seccompDefault and Unconfined without. A Localhost profile is a path
// under the node's seccomp directory.
func seccompFor(psc *v1.PodSecurityContext, csc *v1.SecurityContext, pol securityPolicy) (*runtimeapi.SecurityProfile, error) {
	var p *v1.SeccompProfile
	switch {
	case csc != nil && csc.SeccompProfile != nil:
		p = csc.SeccompProfile
	case psc != nil && psc.SeccompProfile != nil:
		p = psc.SeccompProfile
	}
	switch {
	case p == nil && pol.seccompDefault, p != nil && p.Type == v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case p != nil && p.Type == v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, errors.New("localhostProfile must be set if seccompProfile type is Localhost.") //nolint:staticcheck // upstream's wording
		}
		return &runtimeapi.SecurityProfile{
			ProfileType:  runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(pol.seccompRoot, *p.LocalhostProfile),
		}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

// appArmorFor converts the container's profile to CRI: the profile and,
// for runtimes that read only the deprecated string, its old spelling.
func appArmorFor(pod *v1.Pod, c *v1.Container) (*runtimeapi.SecurityProfile, string, error) {
	p := apparmor.Profile(pod, c)
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case v1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, v1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case v1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, v1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case v1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil {
			return nil, "", errors.New("missing localhost apparmor profile name")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile},
			v1.DeprecatedAppArmorBetaProfileNamePrefix + *p.LocalhostProfile, nil
	}
	return nil, "", fmt.Errorf("unknown apparmor profile type: %q", p.Type)
}
