package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// ContainerDevices returns the raw block devices of container c of pod,
// one per volumeDevice, in order: the host path of the volume's device
// (SetUpResult.Device) at the container's devicePath, with permissions
// "mrw", or "r" when the volume is read-only, as upstream's
// makeBlockVolumes. It fits podopts.Builder.VolumeDevices. The pod's
// volumes must be set up (WaitForAttachAndMount). Errors carry upstream's
// messages, for the CreateContainerConfigError status.
func (m *Manager) ContainerDevices(_ context.Context, pod *v1.Pod, c *v1.Container) ([]nodekit.Device, error) {
	if pod == nil || c == nil {
		return nil, errors.New("volumemgr: ContainerDevices needs a pod and a container")
	}
	if len(c.VolumeDevices) == 0 {
		return nil, nil
	}
	type dev struct {
		path     string
		readOnly bool
	}
	devs := map[string]dev{}
	m.mu.Lock()
	if a := m.actual[pod.UID]; a != nil {
		for name, v := range a.volumes {
			if v.setUp && v.device != "" {
				devs[name] = dev{path: v.device, readOnly: v.readOnly}
			}
		}
	}
	m.mu.Unlock()
	out := make([]nodekit.Device, 0, len(c.VolumeDevices))
	for _, vd := range c.VolumeDevices {
		if !filepath.IsAbs(vd.DevicePath) {
			return nil, fmt.Errorf("error DevicePath `%s` must be an absolute path", vd.DevicePath)
		}
		d, ok := devs[vd.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to pass into container %q", vd.Name, c.Name)
		}
		perm := "mrw"
		if d.readOnly {
			perm = "r"
		}
		out = append(out, nodekit.Device{PathOnHost: d.path, PathInContainer: vd.DevicePath, Permissions: perm})
	}
	return out, nil
}

// checkVolumeMode refuses a block volume (block: its plugin gave a device)
// that a container mounts, and a file system volume that a container
// names in volumeDevices, with upstream's messages (its desired-state
// populator's).
func checkVolumeMode(pod *v1.Pod, name string, block bool) error {
	mounted, device := UsesVolume(pod, name)
	switch {
	case mounted && block:
		return fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", name, v1.PersistentVolumeBlock)
	case device && !block:
		return fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", name, v1.PersistentVolumeFilesystem)
	}
	return nil
}

// UsesVolume reports whether a container (init, regular or ephemeral) of
// pod mounts the volume name (volumeMounts) and whether one is given it
// as a raw block device (volumeDevices).
func UsesVolume(pod *v1.Pod, name string) (mounted, device bool) {
	for _, ms := range allContainerMounts(pod) {
		for _, vm := range ms {
			mounted = mounted || vm.Name == name
		}
	}
	check := func(ds []v1.VolumeDevice) {
		for _, d := range ds {
			device = device || d.Name == name
		}
	}
	for _, c := range pod.Spec.InitContainers {
		check(c.VolumeDevices)
	}
	for _, c := range pod.Spec.Containers {
		check(c.VolumeDevices)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		check(c.VolumeDevices)
	}
	return mounted, device
}
