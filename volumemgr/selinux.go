package volumemgr

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/selinux"
)

// MultipleSELinuxLabelsError is the failure of a PV-backed volume that
// containers with different SELinux labels mount (upstream's message:
// "multiple SELinux labels found: A,B"): it cannot be mounted with one
// context. The pod's volumes are not processed (WaitForAttachAndMount's
// "failed to process volumes").
type MultipleSELinuxLabelsError struct{ Labels []string }

func (e *MultipleSELinuxLabelsError) Error() string {
	return "multiple SELinux labels found: " + strings.Join(e.Labels, ",")
}

// volumeSELinuxLabel is the SELinux file label pod volume vol is to be
// mounted with, as upstream's desired state computes it: "" on a host
// without SELinux; else the one label of the containers (init, regular,
// ephemeral) that mount it, by their effective seLinuxOptions, "" when
// they have none or when the pod's seLinuxChangePolicy is Recursive.
// Labels that cannot be computed, or differ between the containers, fail
// a PV-backed volume (one upstream could mount with -o context; with
// SELinuxMount GA that is every PV); for other volumes upstream only
// counts a warning and mounts them without a label, and so does this.
func volumeSELinuxLabel(s SELinux, pod *v1.Pod, vol *v1.Volume) (string, error) {
	if s == nil || !s.Enabled() {
		return "", nil
	}
	pvBacked := vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil
	var labels []string
	for _, opts := range containerSELinuxOptions(pod, vol.Name) {
		l, err := s.FileLabel(opts)
		if err != nil {
			if !pvBacked {
				return "", nil
			}
			return "", fmt.Errorf("failed to construct SELinux label from context %q: %w", opts, err)
		}
		if !slices.Contains(labels, l) {
			labels = append(labels, l)
		}
	}
	switch {
	case len(labels) > 1 && pvBacked:
		slices.Sort(labels)
		return "", &MultipleSELinuxLabelsError{Labels: labels}
	case len(labels) != 1:
		return "", nil
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SELinuxChangePolicy != nil && *sc.SELinuxChangePolicy == v1.SELinuxChangePolicyRecursive {
		return "", nil
	}
	return labels[0], nil
}

// containerSELinuxOptions returns the effective seLinuxOptions (the
// container's, else the pod's) of each container that mounts volume name
// and has some.
func containerSELinuxOptions(pod *v1.Pod, name string) []*v1.SELinuxOptions {
	var podOpts *v1.SELinuxOptions
	if pod.Spec.SecurityContext != nil {
		podOpts = pod.Spec.SecurityContext.SELinuxOptions
	}
	var out []*v1.SELinuxOptions
	visit := func(c *v1.Container) {
		if !slices.ContainsFunc(c.VolumeMounts, func(vm v1.VolumeMount) bool { return vm.Name == name }) {
			return
		}
		opts := podOpts
		if c.SecurityContext != nil && c.SecurityContext.SELinuxOptions != nil {
			opts = c.SecurityContext.SELinuxOptions
		}
		if opts != nil {
			out = append(out, opts)
		}
	}
	for i := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		visit((*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}

// The real host's SELinux is the default of Config.SELinux.
var _ SELinux = selinux.Host{}
