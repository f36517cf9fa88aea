// Package apparmor resolves a container's AppArmor profile from the pod's
// fields and deprecated annotations, once for both admission (which refuses
// profiles the host cannot enforce) and criruntime (which passes the
// profile to the runtime), so the two never disagree.
package apparmor

import (
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Profile is the container's AppArmor profile as upstream kubelet v1.37
// resolves it: the container's securityContext.appArmorProfile, else the
// deprecated annotation container.apparmor.security.beta.kubernetes.io/NAME
// (runtime/default, unconfined or localhost/PROFILE; any other value is
// ignored), else the pod's securityContext.appArmorProfile. Nil when none
// is set: the runtime applies its default.
func Profile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if val, ok := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case val == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
		case val == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// Required reports whether the pod asks for any AppArmor profile other
// than unconfined, on the pod, on any container (init and ephemeral ones
// included) or in a deprecated annotation.
func Required(pod *v1.Pod) bool {
	confined := func(p *v1.AppArmorProfile) bool { return p != nil && p.Type != v1.AppArmorProfileTypeUnconfined }
	if pod.Spec.SecurityContext != nil && confined(pod.Spec.SecurityContext.AppArmorProfile) {
		return true
	}
	found := false
	VisitContainers(pod, func(c *v1.Container) {
		if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
			found = true
		}
	})
	if found {
		return true
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// VisitContainers calls fn for every init, regular and ephemeral container.
func VisitContainers(pod *v1.Pod, fn func(c *v1.Container)) {
	for i := range pod.Spec.InitContainers {
		fn(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		fn(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		fn((*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
}

// HostEnabled reports whether the kernel enforces AppArmor, by upstream's
// test: securityfs has an apparmor directory and the module's enabled
// parameter reads Y.
func HostEnabled() bool {
	if _, err := os.Stat("/sys/kernel/security/apparmor"); err != nil {
		return false
	}
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && len(b) > 1 && b[0] == 'Y'
}
