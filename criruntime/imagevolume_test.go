package criruntime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekit/nodekit"
)

// versionedRuntime answers CRI Version as the runtime named.
type versionedRuntime struct {
	*recordingRuntime
	name, version string
}

func (r *versionedRuntime) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: r.name, RuntimeVersion: r.version, RuntimeApiVersion: "v1"}, nil
}

// newImageVolumeFake is a fake runtime reporting name and version, with the
// container image busybox:1.36 present.
func newImageVolumeFake(t *testing.T, name, version string) (*Runtime, *recordingRuntime, *critest.FakeImageService, *eventLog) {
	t.Helper()
	rs := &recordingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(),
		sandboxConfigs: map[string]*runtimeapi.PodSandboxConfig{}, containerConfigs: map[string]*runtimeapi.ContainerConfig{}}
	is := critest.NewFakeImageService()
	is.SetFakeImages([]string{"busybox:1.36"})
	ev := &eventLog{}
	r, err := NewFromServices(t.Context(), &versionedRuntime{recordingRuntime: rs, name: name, version: version}, is,
		Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir(), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	return r, rs, is, ev
}

// imageVolumePod has an image volume "tools" of image ref and policy,
// mounted by container "app" (whole and its etc directory) and not by
// container "plain".
func imageVolumePod(ref string, policy v1.PullPolicy) *v1.Pod {
	pod := testPod(
		v1.Container{Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent, VolumeMounts: []v1.VolumeMount{
			{Name: "tools", MountPath: "/tools"}, {Name: "tools", MountPath: "/etc-tools", SubPath: "etc"}}},
		v1.Container{Name: "plain", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent},
	)
	pod.Annotations = map[string]string{"a": "b"}
	pod.Spec.Volumes = []v1.Volume{{Name: "tools", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}}
	return pod
}

// volumeMountsOpts gives the mounts volumemgr gives for imageVolumePod.
func volumeMountsOpts(_ context.Context, pod *v1.Pod, c *v1.Container, _ []string) (*nodekit.ContainerOptions, error) {
	opts := &nodekit.ContainerOptions{}
	for _, vm := range c.VolumeMounts {
		opts.Mounts = append(opts.Mounts, nodekit.Mount{Name: vm.Name, ContainerPath: vm.MountPath, ReadOnly: true,
			Image: pod.Spec.Volumes[0].Image.Reference, ImageSubPath: vm.SubPath})
	}
	return opts, nil
}

func configOf(t *testing.T, rs *recordingRuntime, name string) *runtimeapi.ContainerConfig {
	t.Helper()
	for _, c := range rs.containerConfigs {
		if c.GetMetadata().GetName() == name {
			return c
		}
	}
	return nil
}

// TestImageVolumeMounted: the volume's image is made present under its
// pull policy before the containers start, and the CRI mount names it by
// ID with the reference, the pod's runtime handler and annotations, the
// subPath, read-only and without relabelling.
func TestImageVolumeMounted(t *testing.T) {
	r, rs, is, ev := newImageVolumeFake(t, "containerd", "v2.4.2")
	is.SetFakeImages([]string{"busybox:1.36", "tools:latest"})
	pod := imageVolumePod("tools", v1.PullIfNotPresent)
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: volumeMountsOpts,
		Sandbox: nodekit.SandboxOptions{RuntimeHandler: "runc"},
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(is.Called, "PullImage") {
		t.Errorf("IfNotPresent pulled a present image: %v", is.Called)
	}
	cfg := configOf(t, rs, "app")
	if cfg == nil || len(cfg.Mounts) != 2 {
		t.Fatalf("app config = %+v", cfg)
	}
	for i, sub := range []string{"", "etc"} {
		m := cfg.Mounts[i]
		if m.HostPath != "" || !m.Readonly || m.SelinuxRelabel || m.ImageSubPath != sub {
			t.Errorf("mount %d = %+v", i, m)
		}
		want := &runtimeapi.ImageSpec{Image: "tools:latest", UserSpecifiedImage: "tools", RuntimeHandler: "runc", Annotations: map[string]string{"a": "b"}}
		if m.GetImage().String() != want.String() {
			t.Errorf("mount %d image = %v, want %v", i, m.GetImage(), want)
		}
	}
	if n := countContaining(ev.list(), `Container image "tools" already present on machine`); n != 1 {
		t.Errorf("volume image checked %d times, want once per sync: %q", n, ev.list())
	}

	// Always pulls the volume's image, once per sync.
	r, _, is, _ = newImageVolumeFake(t, "containerd", "v2.4.2")
	res = r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: imageVolumePod("tools:1", v1.PullAlways), Options: volumeMountsOpts,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if n := countContaining(is.Called, "PullImage"); n != 1 {
		t.Errorf("pulls = %d, want 1: %v", n, is.Called)
	}
}

func countContaining(list []string, sub string) int {
	n := 0
	for _, s := range list {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// TestImageVolumePullFailures: a volume whose image cannot be made present
// fails the containers that mount it with the pull's reason and message,
// naming the volume's image for the back-off; the others start.
func TestImageVolumePullFailures(t *testing.T) {
	cases := []struct {
		name    string
		policy  v1.PullPolicy
		pullErr error
		reason  nodekit.Reason
		message string
	}{
		{name: "never, absent", policy: v1.PullNever, reason: nodekit.ErrImageNeverPull,
			message: `Container image "tools:1" is not present with pull policy of Never`},
		{name: "pull fails", policy: v1.PullIfNotPresent, pullErr: errors.New("not found"), reason: nodekit.ErrImagePull,
			message: `not found`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, rs, is, ev := newImageVolumeFake(t, "containerd", "2.1.0")
			if tc.pullErr != nil {
				is.InjectError("PullImage", tc.pullErr)
			}
			pod := imageVolumePod("tools:1", tc.policy)
			res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: volumeMountsOpts,
				Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
			var app, plain error
			for _, a := range res.Results {
				switch a.Target {
				case "app":
					app = a.Err
				case "plain":
					plain = a.Err
				}
			}
			var ae *nodekit.ActionError
			if !errors.As(app, &ae) || ae.Reason != tc.reason || ae.Message != tc.message || ae.Image != "tools:1" || ae.Target != "app" {
				t.Fatalf("app: %v (%+v)", app, ae)
			}
			if plain != nil {
				t.Errorf("plain does not mount the volume but failed: %v", plain)
			}
			if configOf(t, rs, "app") != nil || configOf(t, rs, "plain") == nil {
				t.Errorf("containers created: %v", rs.containerConfigs)
			}
			// One "Error: REASON" per mount of the failed volume, as upstream.
			if n := countContaining(ev.list(), "Warning Failed Error: "+string(tc.reason)); n != 2 {
				t.Errorf("%d Failed events, want 2: %q", n, ev.list())
			}
		})
	}
}

// TestImageVolumeNotPulledForOthers: starting a container that mounts no
// image volume makes none present, so the start of a second container
// does not retry a volume pull the sync loop holds in back-off; the
// container that mounts it still pulls it (once per sync).
func TestImageVolumeNotPulledForOthers(t *testing.T) {
	r, rs, is, ev := newImageVolumeFake(t, "containerd", "v2.4.2")
	is.InjectError("PullImage", errors.New("not found"))
	pod := imageVolumePod("tools:1", v1.PullAlways)
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: volumeMountsOpts,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{1}}})
	if err := res.Err(); err != nil {
		t.Fatalf("plain: %v", err)
	}
	if n := countContaining(is.Called, "PullImage"); n != 0 {
		t.Errorf("pulls = %d starting only plain, want 0: %v", n, is.Called)
	}
	if n := countContaining(ev.list(), "tools:1"); n != 0 {
		t.Errorf("events about the volume's image starting only plain: %q", ev.list())
	}
	if configOf(t, rs, "plain") == nil {
		t.Error("plain not created")
	}
	st, err := r.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	res = r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Status: st, Options: volumeMountsOpts,
		Actions: nodekit.PodActions{ContainersToStart: []int{0}}})
	var ae *nodekit.ActionError
	if !errors.As(res.Err(), &ae) || ae.Reason != nodekit.ErrImagePull || ae.Image != "tools:1" || ae.Message != "not found" {
		t.Fatalf("app: %v", res.Err())
	}
	if n := countContaining(is.Called, "PullImage"); n != 1 {
		t.Errorf("pulls = %d starting app, want 1: %v", n, is.Called)
	}
	want := []string{`Normal Pulling Pulling image "tools:1"`, `Warning Failed Failed to pull image "tools:1": not found`, `Warning Failed Error: ErrImagePull`, `Warning Failed Error: ErrImagePull`} // one per mount
	if got := ev.list(); len(got) < 4 || strings.Join(got[len(got)-4:], "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want them to end with %q", got, want)
	}
}

// TestImageVolumeUnsupportedRuntime: on containerd before 2.1 (which would
// ignore the image of a mount and start the container with nothing at the
// path) a container mounting an image volume fails with a clear reason,
// nothing is pulled, and containers that do not mount one still start.
func TestImageVolumeUnsupportedRuntime(t *testing.T) {
	r, rs, is, _ := newImageVolumeFake(t, "containerd", "1.6.20~ds1")
	pod := imageVolumePod("tools:1", v1.PullIfNotPresent)
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Options: volumeMountsOpts,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
	var ae *nodekit.ActionError
	if !errors.As(res.Err(), &ae) || ae.Target != "app" || ae.Reason != nodekit.ErrCreateContainerConfig {
		t.Fatalf("err = %v", res.Err())
	}
	want := `image volume "tools" (image "tools:1") cannot be mounted: container runtime containerd 1.6.20~ds1 does not support image volumes (containerd 2.1 or later does)`
	if ae.Message != want {
		t.Errorf("message = %q\nwant %q", ae.Message, want)
	}
	if slices.Contains(is.Called, "PullImage") || configOf(t, rs, "app") != nil || configOf(t, rs, "plain") == nil {
		t.Errorf("calls %v, configs %v", is.Called, rs.containerConfigs)
	}
}

func TestImageVolumeSupport(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		ok            bool
	}{
		{"containerd", "1.6.20~ds1", false},
		{"containerd", "v1.7.27", false},
		{"containerd", "v2.0.5", false},
		{"containerd", "v2.1.0", true},
		{"containerd", "2.2.0-rc.1", true},
		{"containerd", "v2.4.2", true},
		{"containerd", "3.0", true},
		{"containerd", "dev", false},
		{"cri-o", "1.31.0", true},
	} {
		if err := imageVolumeSupport(tc.name, tc.version); (err == nil) != tc.ok {
			t.Errorf("%s %s: %v, want supported=%v", tc.name, tc.version, err, tc.ok)
		}
	}
}

// TestImageVolumePullSecrets: the volume's image is pulled with the pod's
// pull secrets, as a container image is.
func TestImageVolumePullSecrets(t *testing.T) {
	r, _, is, _ := newImageVolumeFake(t, "containerd", "v2.4.2")
	secret := v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{
		v1.DockerConfigJsonKey: []byte(`{"auths":{"reg.example":{"username":"u","password":"p"}}}`)}}
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: imageVolumePod("reg.example/tools:1", v1.PullAlways), Options: volumeMountsOpts,
		PullSecrets: []v1.Secret{secret}, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	is.AssertImagePulledWithAuth(t, &runtimeapi.ImageSpec{Image: "reg.example/tools:1", UserSpecifiedImage: "reg.example/tools:1"},
		&runtimeapi.AuthConfig{Username: "u", Password: "p"}, "volume image not pulled with the pod's secret")
}

// volumeCounts records ImageVolumeMetrics over Metrics that discards the rest.
type volumeCounts struct {
	noMetrics
	requested, succeeded, failed int
}

func (v *volumeCounts) ImageVolumeMounts(requested, succeeded, failed int) {
	v.requested, v.succeeded, v.failed = v.requested+requested, v.succeeded+succeeded, v.failed+failed
}

var _ ImageVolumeMetrics = (*volumeCounts)(nil)

// TestImageVolumeMetrics counts as upstream: each image volume a started
// container mounts is requested once, each of its mounts succeeded, or
// failed when the runtime refused the container with
// ImageVolumeMountFailed; a failed pull counts nothing.
func TestImageVolumeMetrics(t *testing.T) {
	run := func(t *testing.T, createErr error, pullErr error) *volumeCounts {
		counts := &volumeCounts{}
		rs := &recordingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(),
			sandboxConfigs: map[string]*runtimeapi.PodSandboxConfig{}, containerConfigs: map[string]*runtimeapi.ContainerConfig{}}
		if createErr != nil {
			rs.InjectError("CreateContainer", createErr)
		}
		is := critest.NewFakeImageService()
		is.SetFakeImages([]string{"busybox:1.36"})
		if pullErr != nil {
			is.InjectError("PullImage", pullErr)
		}
		r, err := NewFromServices(t.Context(), &versionedRuntime{recordingRuntime: rs, name: "containerd", version: "v2.4.2"}, is,
			Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir(), Metrics: counts})
		if err != nil {
			t.Fatal(err)
		}
		r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: imageVolumePod("tools:1", v1.PullIfNotPresent), Options: volumeMountsOpts,
			Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
		return counts
	}
	for _, tc := range []struct {
		name                         string
		createErr, pullErr           error
		requested, succeeded, failed int
	}{
		{name: "mounted", requested: 1, succeeded: 2},
		{name: "mount refused", createErr: errors.New("failed to mount image volume: ImageVolumeMountFailed: no subpath"), requested: 1, failed: 2},
		{name: "other create failure", createErr: errors.New("no space"), requested: 1, succeeded: 2},
		{name: "pull failed", pullErr: errors.New("not found")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.createErr, tc.pullErr)
			if got.requested != tc.requested || got.succeeded != tc.succeeded || got.failed != tc.failed {
				t.Errorf("requested/succeeded/failed = %d/%d/%d, want %d/%d/%d", got.requested, got.succeeded, got.failed, tc.requested, tc.succeeded, tc.failed)
			}
		})
	}
}

// statusCounting answers every ContainerStatus with NotFound and counts the
// calls.
type statusCounting struct {
	*versionedRuntime
	calls int
}

func (r *statusCounting) ContainerStatus(context.Context, string, bool) (*runtimeapi.ContainerStatusResponse, error) {
	r.calls++
	return nil, status.Error(codes.NotFound, "no such container")
}

func TestMountedImagesAskOnlyWhatCanMount(t *testing.T) {
	for _, tc := range []struct {
		version   string
		wantCalls int
	}{
		{"v2.4.2", 1},     // asked; the container has gone: nothing mounted
		{"1.6.20~ds1", 0}, // cannot mount images: not asked
	} {
		rs := &statusCounting{versionedRuntime: &versionedRuntime{recordingRuntime: &recordingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(),
			sandboxConfigs: map[string]*runtimeapi.PodSandboxConfig{}, containerConfigs: map[string]*runtimeapi.ContainerConfig{}},
			name: "containerd", version: tc.version}}
		r, err := NewFromServices(t.Context(), rs, critest.NewFakeImageService(), Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := r.MountedImages(t.Context(), nodekit.ContainerID{Type: "containerd", ID: "gone"})
		if err != nil || ids != nil || rs.calls != tc.wantCalls {
			t.Errorf("containerd %s: MountedImages = %v, %v after %d ContainerStatus calls, want nothing after %d", tc.version, ids, err, rs.calls, tc.wantCalls)
		}
	}
}

// TestSecondContainerOfFailedImage: when two containers of a pod share an
// image whose pull fails, the image is pulled once; the second container
// gets upstream's ImagePullBackOff with the first failure in its message.
func TestSecondContainerOfFailedImage(t *testing.T) {
	r, _, is, ev := newImageVolumeFake(t, "containerd", "v2.4.2")
	is.InjectError("PullImage", errors.New("not found"))
	pod := testPod(v1.Container{Name: "a", Image: "absent:1", ImagePullPolicy: v1.PullAlways},
		v1.Container{Name: "b", Image: "absent:1", ImagePullPolicy: v1.PullAlways})
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}})
	got := map[string]*nodekit.ActionError{}
	for _, a := range res.Results {
		var ae *nodekit.ActionError
		if errors.As(a.Err, &ae) {
			got[a.Target] = ae
		}
	}
	if a := got["a"]; a == nil || a.Reason != nodekit.ErrImagePull || a.Message != "not found" {
		t.Errorf("a: %+v", a)
	}
	want := `Back-off pulling image "absent:1": ErrImagePull: not found`
	if b := got["b"]; b == nil || b.Reason != nodekit.ErrImagePullBackOff || b.Message != want {
		t.Errorf("b: %+v, want ImagePullBackOff %q", b, want)
	}
	if n := countContaining(is.Called, "PullImage"); n != 1 {
		t.Errorf("pulls = %d, want 1: %v", n, is.Called)
	}
	if n := countContaining(ev.list(), `Normal BackOff Back-off pulling image "absent:1"`); n != 1 {
		t.Errorf("BackOff events = %d, want 1: %q", n, ev.list())
	}
}
