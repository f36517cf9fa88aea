package main

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/agenttest"
)

// imageVolume is a volume "vol" showing image ref.
func imageVolume(ref string, policy v1.PullPolicy) v1.Volume {
	return v1.Volume{Name: "vol", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}
}

// TestImageVolumes runs pods with image volumes through the whole agent
// (API server, sync loop, volume manager, criruntime). On containerd 2, as
// upstream's ImageVolume e2e specs do: the image's files read-only at the
// path and under a subPath, a pull failure held in ErrImagePull and then
// ImagePullBackOff naming the volume's image, policy Never with the image
// absent, and an unused volume whose image is missing not holding the pod.
// On containerd 1.6 (the default pass), which cannot mount images, the
// container that mounts one waits in CreateContainerConfigError naming the
// runtime, and the unused volume still does not hold its pod.
func TestImageVolumes(t *testing.T) {
	e := startEnv(t)
	if e.cri.Version != agenttest.ContainerdVersion2 {
		testImageVolumesRefused(t, e)
		return
	}

	mounted := simplePod("imgvol", v1.RestartPolicyAlways, "sleep 3600")
	mounted.Spec.Volumes = []v1.Volume{imageVolume(agenttest.NonRootImage, v1.PullIfNotPresent)}
	mounted.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}, {Name: "vol", MountPath: "/sub", SubPath: "bin"}}
	e.createPod(t, mounted)

	pullFails := simplePod("imgvol-pull", v1.RestartPolicyAlways, "sleep 3600")
	pullFails.Spec.Volumes = []v1.Volume{imageVolume("registry.example/absent:1.0", v1.PullIfNotPresent)}
	pullFails.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}}
	e.createPod(t, pullFails)

	never := simplePod("imgvol-never", v1.RestartPolicyAlways, "sleep 3600")
	never.Spec.Volumes = []v1.Volume{imageVolume("registry.example/absent:1.0", v1.PullNever)}
	never.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}}
	e.createPod(t, never)

	unused := simplePod("imgvol-unused", v1.RestartPolicyAlways, "sleep 3600")
	unused.Spec.Volumes = []v1.Volume{imageVolume("registry.example/absent:1.0", v1.PullNever)}
	e.createPod(t, unused)

	t.Run("files read-only at the path and subPath", func(t *testing.T) {
		p := e.waitPod(t, "imgvol", 90*time.Second, "Running", func(p *v1.Pod) bool { return ready(p, "app") })
		e.exec(t, p, "app", "ls", "/vol/bin/busybox", "/sub/busybox")
		for _, path := range []string{"/vol/x", "/sub/x"} {
			out, code, err := e.tryExec(t, p, "app", "touch", path)
			if err != nil || code == 0 || !strings.Contains(out, "Read-only file system") {
				t.Errorf("touch %s: code %d, %v, %q; want Read-only file system", path, code, err, out)
			}
		}
	})

	t.Run("pull failure: ErrImagePull then ImagePullBackOff", func(t *testing.T) {
		waiting := func(reason string) func(p *v1.Pod) bool {
			return func(p *v1.Pod) bool {
				c := containerStatus(p, "app")
				return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == reason
			}
		}
		p := e.waitPod(t, "imgvol-pull", 60*time.Second, "ErrImagePull", waiting("ErrImagePull"))
		// As upstream: the pull's error alone, the image in the event.
		if msg := containerStatus(p, "app").State.Waiting.Message; msg == "" || strings.HasPrefix(msg, "Failed to pull image") {
			t.Errorf("ErrImagePull message = %q, want the pull's error", msg)
		}
		e.waitEvent(t, "imgvol-pull", "Failed", `Failed to pull image "registry.example/absent:1.0": `)
		p = e.waitPod(t, "imgvol-pull", 60*time.Second, "ImagePullBackOff", waiting("ImagePullBackOff"))
		want := `Back-off pulling image "registry.example/absent:1.0": ErrImagePull: `
		if msg := containerStatus(p, "app").State.Waiting.Message; !strings.HasPrefix(msg, want) || len(msg) == len(want) {
			t.Errorf("ImagePullBackOff message = %q, want %q and the last pull's error", msg, want)
		}
		e.waitEvent(t, "imgvol-pull", "BackOff", `Back-off pulling image "registry.example/absent:1.0"`)
		if p.Status.Phase != v1.PodPending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
	})

	t.Run("policy Never with the image absent", func(t *testing.T) {
		p := e.waitPod(t, "imgvol-never", 60*time.Second, "ErrImageNeverPull", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "ErrImageNeverPull"
		})
		if msg := containerStatus(p, "app").State.Waiting.Message; msg != `Container image "registry.example/absent:1.0" is not present with pull policy of Never` {
			t.Errorf("message = %q", msg)
		}
	})

	t.Run("an unused volume's missing image does not hold the pod", func(t *testing.T) {
		p := e.waitPod(t, "imgvol-unused", 60*time.Second, "Running", func(p *v1.Pod) bool { return ready(p, "app") })
		if out := e.exec(t, p, "app", "ls", "/"); strings.Contains(out, "vol") {
			t.Errorf("/ holds a vol entry: %q", out)
		}
	})
}

// testImageVolumesRefused: on a containerd without image-volume support
// the mounting container is refused clearly, never started without its
// volume.
func testImageVolumesRefused(t *testing.T, e *env) {
	mounted := simplePod("imgvol", v1.RestartPolicyAlways, "sleep 3600")
	mounted.Spec.Volumes = []v1.Volume{imageVolume(agenttest.NonRootImage, v1.PullIfNotPresent)}
	mounted.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}}
	e.createPod(t, mounted)
	unused := simplePod("imgvol-unused", v1.RestartPolicyAlways, "sleep 3600")
	unused.Spec.Volumes = []v1.Volume{imageVolume(agenttest.NonRootImage, v1.PullIfNotPresent)}
	e.createPod(t, unused)

	p := e.waitPod(t, "imgvol", 60*time.Second, "CreateContainerConfigError", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "CreateContainerConfigError"
	})
	want := `image volume "vol" (image "` + agenttest.NonRootImage + `") cannot be mounted: container runtime containerd ` +
		e.cri.RuntimeVersion + ` does not support image volumes (containerd 2.1 or later does)`
	if msg := containerStatus(p, "app").State.Waiting.Message; msg != want {
		t.Errorf("message = %q\nwant %q", msg, want)
	}
	if p.Status.Phase != v1.PodPending {
		t.Errorf("phase %s, want Pending", p.Status.Phase)
	}
	e.waitPod(t, "imgvol-unused", 60*time.Second, "Running", func(p *v1.Pod) bool { return ready(p, "app") })
}
