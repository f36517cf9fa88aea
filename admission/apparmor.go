package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/apparmor"
)

// AppArmor rejects a pending pod that asks for an AppArmor profile the
// node cannot enforce, as upstream kubelet's AppArmor admit handler:
//
//   - any profile other than unconfined (securityContext.appArmorProfile on
//     the pod or a container, or a deprecated
//     container.apparmor.security.beta.kubernetes.io/NAME annotation) on a
//     host without AppArmor: reason AppArmor, message "Cannot enforce
//     AppArmor: AppArmor is not enabled on the host";
//   - a Localhost profile with an empty name, on any host: "Cannot enforce
//     AppArmor: invalid empty AppArmor profile name: ...".
//
// A pod past Pending (already running when the agent restarted) is
// admitted without a check, as upstream. Upstream looks at the annotations
// in map order and stops at the first; nodekit refuses when any of them
// asks for a confined profile, which refuses every pod upstream may refuse.
type AppArmor struct {
	hostErr error
}

// NewAppArmor returns the admitter for a host that does (enabled) or does
// not enforce AppArmor; pass apparmor.HostEnabled's answer through
// AppArmorHostEnabled.
func NewAppArmor(enabled bool) *AppArmor {
	a := &AppArmor{}
	if !enabled {
		a.hostErr = errors.New("AppArmor is not enabled on the host")
	}
	return a
}

// AppArmorHostEnabled reports whether this host's kernel enforces AppArmor
// (/sys/kernel/security/apparmor exists and
// /sys/module/apparmor/parameters/enabled is Y), as upstream checks once at
// start.
func AppArmorHostEnabled() bool { return apparmor.HostEnabled() }

// Admit implements nodekit.Admitter.
func (a *AppArmor) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	pod := req.Pod
	if pod.Status.Phase != v1.PodPending && pod.Status.Phase != "" {
		return nodekit.Admitted
	}
	if !apparmor.Required(pod) {
		return nodekit.Admitted
	}
	if a.hostErr != nil {
		return appArmorRejection(a.hostErr)
	}
	var err error
	apparmor.VisitContainers(pod, func(c *v1.Container) {
		p := apparmor.Profile(pod, c)
		if err == nil && p != nil && p.Type == v1.AppArmorProfileTypeLocalhost && (p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
			err = fmt.Errorf("invalid empty AppArmor profile name: %q", p)
		}
	})
	if err != nil {
		return appArmorRejection(err)
	}
	return nodekit.Admitted
}

func appArmorRejection(err error) nodekit.Decision {
	return nodekit.Decision{Reason: ReasonAppArmor, Message: fmt.Sprintf("Cannot enforce AppArmor: %v", err)}
}
