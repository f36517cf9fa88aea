package volumemgr_test

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestVolumeDevicesOfFilesystemVolume: a volume whose plugin gives no
// device (here emptyDir) named in volumeDevices fails to set up with
// upstream's message, and the container gets no device.
func TestVolumeDevicesOfFilesystemVolume(t *testing.T) {
	f := newFixture(t)
	pod := testPod("dev", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	pod.Spec.Containers[0].VolumeMounts = nil
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "scratch", DevicePath: "/dev/xvda"}}
	f.m.AddPod(pod)
	f.reconcile()
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	err := f.m.WaitForAttachAndMount(ctx, pod)
	if want := "volume scratch has volumeMode Filesystem, but is specified in volumeDevices"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("WaitForAttachAndMount: %v, want it to say %q", err, want)
	}
	if _, err := f.m.ContainerDevices(f.ctx, pod, &pod.Spec.Containers[0]); err == nil ||
		err.Error() != `cannot find volume "scratch" to pass into container "app"` {
		t.Errorf("ContainerDevices: %v", err)
	}
	pod.Spec.Containers[0].VolumeDevices[0].DevicePath = "dev/xvda"
	if _, err := f.m.ContainerDevices(f.ctx, pod, &pod.Spec.Containers[0]); err == nil || !strings.Contains(err.Error(), "must be an absolute path") {
		t.Errorf("ContainerDevices of a relative devicePath: %v", err)
	}
}
