package criruntime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"

	"github.com/nodekit/nodekit"
)

// Image volumes (volumes[].image), as upstream kubelet v1.37 does them,
// but lazily: before a container that mounts image volumes starts, each of
// them is made present (once per sync) with the pod's pull secrets and the
// volume's pull policy (the same path, events and reasons as container
// images). A pull that fails fails only the containers that mount the
// volume, with the pull's reason and message (ErrImagePull, ErrImageNeverPull, ...); the
// CRI mount of a volume that was pulled names the image by its ID, with the
// subPath, read-only and without SELinux relabelling (the image is not the
// node's to relabel).

// imageVolume is the outcome of making one image volume's image present:
// the spec to mount, or why not.
type imageVolume struct {
	spec *runtimeapi.ImageSpec
	err  *nodekit.ActionError
}

// imageVolumes makes present the image volumes container c mounts, each
// at most once per sync (later calls and containers reuse the result), and
// returns every result so far. Unlike upstream, which pulls all of the
// pod's image volumes before any container start, a volume is pulled only
// for a container that mounts it: a container that mounts none never
// pulls an image volume's image, so starting one does not retry a pull the
// caller holds in back-off (syncloop holds the containers that mount it).
// With a runtime that cannot mount images it pulls nothing: the containers
// that mount one fail (checkImageVolumes).
func (r *Runtime) imageVolumes(ctx context.Context, st *syncState, c *v1.Container) map[string]imageVolume {
	if r.imageVolumeErr != nil {
		return st.imageVolumes
	}
	pod := st.Pod
	for _, vm := range c.VolumeMounts {
		vol := podVolume(pod, vm.Name)
		if vol == nil || vol.Image == nil {
			continue
		}
		if _, done := st.imageVolumes[vol.Name]; done {
			continue
		}
		if st.imageVolumes == nil {
			st.imageVolumes = map[string]imageVolume{}
		}
		img, err := r.ensureImageRef(ctx, pod, vol.Image.Reference, vol.Image.PullPolicy, st.PullSecrets, st.SandboxConfig)
		if err != nil {
			err.Image = vol.Image.Reference
			st.imageVolumes[vol.Name] = imageVolume{err: err}
			continue
		}
		st.imageVolumes[vol.Name] = imageVolume{spec: &runtimeapi.ImageSpec{
			Image:              img.GetId(),
			UserSpecifiedImage: vol.Image.Reference,
			RuntimeHandler:     st.Sandbox.RuntimeHandler,
			Annotations:        pod.Annotations,
		}}
	}
	return st.imageVolumes
}

// podVolume is the pod's volume of that name, nil when it has none.
func podVolume(pod *v1.Pod, name string) *v1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

// checkImageVolumes fails container c when it mounts an image volume that
// cannot be mounted: the runtime does not support image volumes, or the
// volume's pull failed (upstream's event "Error: REASON" per such mount,
// and the last failure as the container's). It returns nil otherwise.
func (r *Runtime) checkImageVolumes(ctx context.Context, st *syncState, c *v1.Container, action nodekit.Action) error {
	images := map[string]string{}
	for _, vol := range st.Pod.Spec.Volumes {
		if vol.Image != nil {
			images[vol.Name] = vol.Image.Reference
		}
	}
	if len(images) == 0 {
		return nil
	}
	if r.imageVolumeErr != nil {
		for _, vm := range c.VolumeMounts {
			if ref, ok := images[vm.Name]; ok {
				msg := fmt.Sprintf("image volume %q (image %q) cannot be mounted: %v", vm.Name, ref, r.imageVolumeErr)
				r.events.Eventf(st.Pod, v1.EventTypeWarning, "Failed", "Error: %s", msg)
				return &nodekit.ActionError{Action: action, Target: c.Name, Reason: nodekit.ErrCreateContainerConfig, Message: msg, Err: r.imageVolumeErr}
			}
		}
		return nil
	}
	pulls := r.imageVolumes(ctx, st, c)
	var last *nodekit.ActionError
	for _, vm := range c.VolumeMounts {
		res, ok := pulls[vm.Name]
		if !ok || res.err == nil {
			continue
		}
		r.events.Eventf(st.Pod, v1.EventTypeWarning, "Failed", "Error: %s", res.err.Reason)
		e := *res.err
		e.Action, e.Target = action, c.Name
		last = &e
	}
	if last != nil {
		return last
	}
	return nil
}

// countImageVolumeMounts feeds Config.Metrics' ImageVolumeMetrics, if it
// has them, after a container start whose image volumes were all pulled,
// as upstream: each distinct image volume the container mounts is
// requested; each of its image volume mounts failed if the runtime refused
// to create the container with ImageVolumeMountFailed, else succeeded.
// (Upstream matches the message's prefix, which containerd 2's "failed to
// mount image volume: ImageVolumeMountFailed: ..." does not have, so it
// counts those as succeeded; this counts them as failed.)
func (r *Runtime) countImageVolumeMounts(st *syncState, c *v1.Container, err error) {
	m, ok := r.metrics.(ImageVolumeMetrics)
	if !ok || len(st.imageVolumes) == 0 {
		return
	}
	mountFailed := false
	var ae *nodekit.ActionError
	if errors.As(err, &ae) && ae.Reason == nodekit.ErrCreateContainer {
		mountFailed = strings.Contains(ae.Message, crierrors.ErrImageVolumeMountFailed.Error())
	}
	requested := map[string]bool{}
	succeeded, failed := 0, 0
	for _, vm := range c.VolumeMounts {
		if _, ok := st.imageVolumes[vm.Name]; !ok {
			continue
		}
		requested[vm.Name] = true
		if mountFailed {
			failed++
		} else {
			succeeded++
		}
	}
	m.ImageVolumeMounts(len(requested), succeeded, failed)
}

// imageMount is the CRI mount of an image volume, from the volume's pull.
func imageMount(m nodekit.Mount, pulls map[string]imageVolume) (*runtimeapi.Mount, error) {
	res, ok := pulls[m.Name]
	if !ok || res.spec == nil {
		return nil, fmt.Errorf("mount %q at %s names image %q, but the pod has no image volume %q that was pulled", m.Name, m.ContainerPath, m.Image, m.Name)
	}
	return &runtimeapi.Mount{
		ContainerPath: m.ContainerPath,
		Readonly:      true,
		Propagation:   propagationOf(m.Propagation),
		Image:         res.spec,
		ImageSubPath:  m.ImageSubPath,
	}, nil
}

// MountedImages returns the IDs of the images container id mounts as image
// volumes, from its CRI status (for image GC, which counts them as in use,
// as upstream). It blocks on one CRI call, none on a runtime that cannot
// mount images; the slice is the caller's. A container removed since it was
// listed mounts nothing.
func (r *Runtime) MountedImages(ctx context.Context, id nodekit.ContainerID) ([]string, error) {
	if r.imageVolumeErr != nil {
		return nil, nil
	}
	st, err := r.rs.ContainerStatus(ctx, id.ID, false)
	if crierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range st.GetStatus().GetMounts() {
		if img := m.GetImage().GetImage(); img != "" {
			ids = append(ids, img)
		}
	}
	return ids, nil
}

// imageVolumeSupport returns nil when the runtime (CRI Version's name and
// version) can mount images, or why not. CRI reports no feature for it;
// upstream kubelet does not check, and containerd before 2.1 ignores the
// image of a mount, so the container would start with nothing at the path.
// nodekit refuses such containers instead (a divergence, see doc.go).
// Other runtimes (CRI-O supports image volumes since 1.31) are trusted.
func imageVolumeSupport(name, version string) error {
	if name != "containerd" {
		return nil
	}
	major, minor, ok := majorMinor(version)
	if !ok {
		return fmt.Errorf("cannot tell whether container runtime containerd %q supports image volumes (containerd 2.1 or later does)", version)
	}
	if major < 2 || (major == 2 && minor < 1) {
		return fmt.Errorf("container runtime containerd %s does not support image volumes (containerd 2.1 or later does)", version)
	}
	return nil
}

// majorMinor parses "v2.4.2", "1.6.20~ds1" or "2.1.0-rc.1" into 2,4 / 1,6 / 2,1.
func majorMinor(version string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorDigits := strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	minor, err2 := strconv.Atoi(minorDigits)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}
