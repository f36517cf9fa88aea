package volumemgr_test

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/volumemgr"
)

// imagePod mounts one image volume three ways: whole, read-write as
// written (the volume forces read-only), and a subPath from an expression.
func imagePod() *v1.Pod {
	pod := testPod("img", v1.Volume{Name: "tools", VolumeSource: v1.VolumeSource{
		Image: &v1.ImageVolumeSource{Reference: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", PullPolicy: v1.PullIfNotPresent}}})
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "DIR", Value: "etc"}}
	c.VolumeMounts = append(c.VolumeMounts,
		v1.VolumeMount{Name: "tools", MountPath: "etc-dir", SubPath: "etc", ReadOnly: false},
		v1.VolumeMount{Name: "tools", MountPath: "/expr", SubPathExpr: "$(DIR)/ssl"})
	return pod
}

// TestImageVolumeMounts: an image volume is ready at once, leaves nothing
// on the host, and its container mounts carry the image reference and
// subPath for the runtime, read-only, with no host path.
func TestImageVolumeMounts(t *testing.T) {
	f := newFixture(t)
	pod := imagePod()
	f.mount(pod)
	if ev := f.events.all(); len(ev) != 0 {
		t.Errorf("events: %q", ev)
	}
	if dir := f.volumeDir(pod.UID, volumemgr.ImagePluginName, "tools"); exists(dir) {
		t.Errorf("image volume made a host directory %s", dir)
	}
	if m := f.mnt.Below(f.podDir(pod.UID)); len(m) != 0 {
		t.Errorf("image volume mounted something on the host: %v", m)
	}
	ms, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	ref := pod.Spec.Volumes[0].Image.Reference
	want := []nodekit.Mount{
		{Name: "tools", ContainerPath: "/mnt/tools", ReadOnly: true, Image: ref},
		{Name: "tools", ContainerPath: "/etc-dir", ReadOnly: true, Image: ref, ImageSubPath: "etc"},
		{Name: "tools", ContainerPath: "/expr", ReadOnly: true, Image: ref, ImageSubPath: "etc/ssl"},
	}
	if len(ms) != len(want) {
		t.Fatalf("mounts = %+v", ms)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("mount %d = %+v\nwant %+v", i, ms[i], want[i])
		}
	}
	if _, err := os.Stat(filepath.Join(f.podDir(pod.UID), "volume-subpaths")); err == nil {
		t.Errorf("image subPath made a host bind mount directory")
	}

	// Tear-down leaves nothing behind and needs nothing unmounted.
	f.m.RemovePod(pod.UID)
	f.reconcile()
	if got := f.m.MountedVolumes(pod.UID); len(got) != 0 {
		t.Errorf("still mounted after RemovePod: %v", got)
	}
}

// TestImageVolumeSubPathChecked: subPaths of image volumes get the same
// checks as any volume's, with upstream's messages.
func TestImageVolumeSubPathChecked(t *testing.T) {
	for sub, want := range map[string]string{
		"/etc":        "error SubPath `/etc` must not be an absolute path",
		"etc/../../x": "unable to provision SubPath `etc/../../x`: must not contain '..'",
	} {
		t.Run(sub, func(t *testing.T) {
			f := newFixture(t)
			pod := imagePod()
			pod.Spec.Containers[0].VolumeMounts[1].SubPath = sub
			f.mount(pod)
			_, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
			if err == nil || err.Error() != want {
				t.Fatalf("err = %v, want %s", err, want)
			}
		})
	}
}
