package criruntime

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The /proc and /sys paths upstream hides from unprivileged containers
// (masked) or makes read-only.
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// containerSecurityContext merges the pod's and the container's security
// settings (the container wins) and checks runAsNonRoot against the image's
// user, with upstream's messages.
func containerSecurityContext(pod *v1.Pod, c *v1.Container, img *runtimeapi.Image) (*runtimeapi.LinuxContainerSecurityContext, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &v1.SecurityContext{}
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaceOptions(pod)}

	runAsUser := first(csc.RunAsUser, psc.RunAsUser)
	runAsGroup := first(csc.RunAsGroup, psc.RunAsGroup)
	runAsNonRoot := firstBool(csc.RunAsNonRoot, psc.RunAsNonRoot)
	if runAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *runAsUser}
	}
	if runAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *runAsGroup}
	}
	if runAsNonRoot != nil && *runAsNonRoot {
		if err := verifyNonRoot(pod, c, runAsUser, img); err != nil {
			return nil, err
		}
	}
	sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
	if psc.FSGroup != nil {
		sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
	}

	privileged := csc.Privileged != nil && *csc.Privileged
	sc.Privileged = privileged
	if csc.Capabilities != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, a := range csc.Capabilities.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range csc.Capabilities.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
		}
	}
	sc.ReadonlyRootfs = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	sc.NoNewPrivs = noNewPrivs(csc)
	if !privileged && (csc.ProcMount == nil || *csc.ProcMount != v1.UnmaskedProcMount) {
		sc.MaskedPaths = defaultMaskedPaths
		sc.ReadonlyPaths = defaultReadonlyPaths
	}
	prof := csc.SeccompProfile
	if prof == nil {
		prof = psc.SeccompProfile
	}
	sc.Seccomp = seccompProfile(prof)
	return sc, nil
}

// noNewPrivs is set only when privilege escalation is explicitly disallowed
// and nothing else (privileged, CAP_SYS_ADMIN) grants it anyway.
func noNewPrivs(sc *v1.SecurityContext) bool {
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		return false
	}
	if sc.Privileged != nil && *sc.Privileged {
		return false
	}
	if sc.Capabilities != nil {
		for _, a := range sc.Capabilities.Add {
			if a == "SYS_ADMIN" || a == "CAP_SYS_ADMIN" {
				return false
			}
		}
	}
	return true
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

func seccompProfile(p *v1.SeccompProfile) *runtimeapi.SecurityProfile {
	if p == nil {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case v1.SeccompProfileTypeLocalhost:
		ref := ""
		if p.LocalhostProfile != nil {
			ref = *p.LocalhostProfile
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
}

func first(vs ...*int64) *int64 {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

func firstBool(vs ...*bool) *bool {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}
