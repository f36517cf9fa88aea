package criruntime_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// imageVolumeOpts gives the mounts volumemgr gives for a pod's image
// volumes (volumemgr.ContainerMounts): no host path, the reference and
// subPath, read-only.
func imageVolumeOpts(_ context.Context, pod *v1.Pod, c *v1.Container, _ []string) (*nodekit.ContainerOptions, error) {
	refs := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			refs[v.Name] = v.Image.Reference
		}
	}
	opts := &nodekit.ContainerOptions{}
	for _, vm := range c.VolumeMounts {
		opts.Mounts = append(opts.Mounts, nodekit.Mount{Name: vm.Name, ContainerPath: vm.MountPath, ReadOnly: true,
			Image: refs[vm.Name], ImageSubPath: vm.SubPath})
	}
	return opts, nil
}

// imageVolumeTestPod runs cmd in busybox with image volume "vol" of ref
// and policy mounted at /vol (and, with sub, its sub directory at /sub).
func imageVolumeTestPod(name, ref string, policy v1.PullPolicy, sub string, cmd ...string) *v1.Pod {
	pod := busyboxPod(name, cmd...)
	pod.Spec.Volumes = []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}}
	if sub != "" {
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "vol", MountPath: "/sub", SubPath: sub})
	}
	return pod
}

// TestImageVolumeIntegration mounts images as volumes on a real
// containerd 2: the container sees the image's files read-only at the
// path (and a subPath of it), the container's own image can be its volume
// too, and the failures are upstream's.
func TestImageVolumeIntegration(t *testing.T) {
	cri := agenttest.StartContainerd(t, agenttest.WithContainerdVersion(agenttest.ContainerdVersion2))
	ctx := t.Context()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	sync := func(pod *v1.Pod) *nodekit.SyncResult {
		return rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Options: imageVolumeOpts,
			Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	}

	const probe = `ls /vol/bin/busybox && ls /sub/busybox && cat /proc/self/mountinfo | grep -E ' /(vol|sub) ' ; ` +
		`touch /vol/x 2>&1 || echo write-refused; touch /sub/x 2>&1 || echo sub-write-refused`
	for _, tc := range []struct{ name, pod, image string }{
		{"another image", "iv-other", agenttest.NonRootImage},
		{"the container's own image", "iv-own", agenttest.BusyboxImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := imageVolumeTestPod(tc.pod, tc.image, v1.PullIfNotPresent, "bin", "sh", "-c", probe)
			if err := sync(pod).Err(); err != nil {
				t.Fatalf("SyncPod: %v", err)
			}
			st := waitExited(t, rt, pod, "app")
			b, err := os.ReadFile(st.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			t.Logf("container output:\n%s", log)
			for _, want := range []string{"/vol/bin/busybox", "/sub/busybox", "Read-only file system", "write-refused", "sub-write-refused"} {
				if !strings.Contains(log, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			// mountinfo: ID PARENT DEV ROOT MOUNTPOINT OPTIONS ...; the
			// image's root at /vol and its bin at /sub, both read-only.
			for _, want := range []string{" / /vol ro,", " /bin /sub ro,"} {
				if !strings.Contains(log, want) {
					t.Errorf("mountinfo lacks %q", want)
				}
			}
			// The runtime reports the mounted image (for image GC).
			ids, err := rt.MountedImages(ctx, st.ID)
			if err != nil {
				t.Fatal(err)
			}
			imgs, err := rt.ListImages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var want string
			for _, im := range imgs {
				if slices.Contains(im.RepoTags, tc.image) {
					want = im.Id
				}
			}
			if want == "" || !slices.Equal(ids, []string{want, want}) {
				t.Errorf("MountedImages = %v, want %s twice (/vol and /sub)", ids, want)
			}
			killAndRemove(t, rt, pod)
		})
	}

	t.Run("pull policy Never with the image absent", func(t *testing.T) {
		pod := imageVolumeTestPod("iv-never", "registry.example/absent:1.0", v1.PullNever, "", "true")
		res := sync(pod)
		var ae *nodekit.ActionError
		if !errors.As(res.Err(), &ae) || ae.Reason != nodekit.ErrImageNeverPull || ae.Image != "registry.example/absent:1.0" ||
			ae.Message != `Container image "registry.example/absent:1.0" is not present with pull policy of Never` {
			t.Fatalf("err = %v", res.Err())
		}
		killAndRemove(t, rt, pod)
	})

	t.Run("subPath missing in the image", func(t *testing.T) {
		pod := imageVolumeTestPod("iv-nosub", agenttest.NonRootImage, v1.PullIfNotPresent, "not-existing", "true")
		res := sync(pod)
		var ae *nodekit.ActionError
		if !errors.As(res.Err(), &ae) || ae.Reason != nodekit.ErrCreateContainer ||
			!strings.HasPrefix(ae.Message, `failed to mount image volume: ImageVolumeMountFailed: failed to ensure image subpath "not-existing"`) {
			t.Fatalf("err = %v, want CreateContainerError with the runtime's message", res.Err())
		}
		t.Logf("runtime's refusal: %s", ae.Message)
		killAndRemove(t, rt, pod)
	})
}

// TestImageVolumeContainerd16 checks that containerd 1.6, which would
// ignore the image of a CRI mount, gets no container with an image volume:
// the container fails with a reason naming the runtime.
func TestImageVolumeContainerd16(t *testing.T) {
	cri := agenttest.StartContainerd(t, agenttest.WithContainerdVersion(agenttest.ContainerdVersion16))
	ctx := t.Context()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	pod := imageVolumeTestPod("iv-16", agenttest.NonRootImage, v1.PullIfNotPresent, "", "ls", "/vol")
	res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Options: imageVolumeOpts,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	var ae *nodekit.ActionError
	if !errors.As(res.Err(), &ae) || ae.Reason != nodekit.ErrCreateContainerConfig ||
		!strings.Contains(ae.Message, "container runtime containerd "+cri.RuntimeVersion+" does not support image volumes") {
		t.Fatalf("err = %v", res.Err())
	}
	t.Logf("refused: %s", ae.Message)
	st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.FindContainer("app"); c != nil {
		t.Errorf("a container was created: %+v", c)
	}
	killAndRemove(t, rt, pod)
}
