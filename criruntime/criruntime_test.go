package criruntime

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekit/nodekit"
)

// recordingRuntime keeps the configs the fake CRI runtime was given.
type recordingRuntime struct {
	*critest.FakeRuntimeService
	sandboxConfigs   map[string]*runtimeapi.PodSandboxConfig
	containerConfigs map[string]*runtimeapi.ContainerConfig
	// handlers and features are what Status reports beside the conditions.
	handlers []*runtimeapi.RuntimeHandler
	features *runtimeapi.RuntimeFeatures
	// user is what ContainerStatus reports as every container's user.
	user *runtimeapi.ContainerUser
}

func (r *recordingRuntime) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	st, err := r.FakeRuntimeService.ContainerStatus(ctx, id, verbose)
	if err == nil && st.GetStatus() != nil {
		st.Status.User = r.user
	}
	return st, err
}

func (r *recordingRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	st, err := r.FakeRuntimeService.Status(ctx, verbose)
	if err != nil {
		return nil, err
	}
	st.RuntimeHandlers, st.Features = r.handlers, r.features
	return st, nil
}

func (r *recordingRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	id, err := r.FakeRuntimeService.RunPodSandbox(ctx, cfg, handler)
	r.sandboxConfigs[id] = cfg
	return id, err
}

func (r *recordingRuntime) CreateContainer(ctx context.Context, sb string, cfg *runtimeapi.ContainerConfig, sbc *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.FakeRuntimeService.CreateContainer(ctx, sb, cfg, sbc)
	r.containerConfigs[id] = cfg
	return id, err
}

func newFake(t *testing.T) (*Runtime, *recordingRuntime, *critest.FakeImageService) {
	t.Helper()
	return newFakeWith(t, Config{})
}

// newFakeWith is newFake with cfg's security settings; the endpoint, log
// and root directories are the test's own.
func newFakeWith(t *testing.T, cfg Config) (*Runtime, *recordingRuntime, *critest.FakeImageService) {
	t.Helper()
	rs := &recordingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(),
		sandboxConfigs: map[string]*runtimeapi.PodSandboxConfig{}, containerConfigs: map[string]*runtimeapi.ContainerConfig{}}
	is := critest.NewFakeImageService()
	cfg.Endpoint, cfg.PodLogsDir = "fake", t.TempDir()
	if cfg.RootDir == "" {
		cfg.RootDir = t.TempDir()
	}
	r, err := NewFromServices(t.Context(), rs, is, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, rs, is
}

func testPod(containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec:       v1.PodSpec{Containers: containers},
	}
}

func TestSyncPodCreatesSandboxAndContainer(t *testing.T) {
	r, rs, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1.36"})
	pod := testPod(v1.Container{
		Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent,
		Command: []string{"sh", "-c", "echo $(GREETING) $$(HOME)"},
		Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		},
	})
	opts := func(_ context.Context, _ *v1.Pod, c *v1.Container, ips []string) (*nodekit.ContainerOptions, error) {
		return &nodekit.ContainerOptions{Envs: []nodekit.EnvVar{{Name: "GREETING", Value: "hi"}}}, nil
	}
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{
		Pod:     pod,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
		Options: opts,
	})
	if err := res.Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	if res.SandboxID == "" || len(res.PodIPs) == 0 {
		t.Fatalf("no sandbox/IPs in result: %+v", res)
	}
	sb := rs.sandboxConfigs[res.SandboxID]
	if sb.Labels[labelPodUID] != "uid-1" || sb.Labels["app"] != "web" || sb.Hostname != "web" {
		t.Errorf("sandbox labels/hostname wrong: %v %q", sb.Labels, sb.Hostname)
	}
	if len(rs.containerConfigs) != 1 {
		t.Fatalf("want 1 container, have %d", len(rs.containerConfigs))
	}
	for _, c := range rs.containerConfigs {
		if got, want := c.Command[2], "echo hi $(HOME)"; got != want {
			t.Errorf("command expansion = %q, want %q", got, want)
		}
		if c.LogPath != "app/0.log" {
			t.Errorf("log path = %q", c.LogPath)
		}
		res := c.Linux.Resources
		if res.CpuShares != 256 || res.CpuQuota != 50000 || res.CpuPeriod != 100000 || res.MemoryLimitInBytes != 64<<20 {
			t.Errorf("resources = %+v", res)
		}
		if c.Linux.SecurityContext.MaskedPaths == nil {
			t.Error("unprivileged container has no masked paths")
		}
	}

	st, err := r.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.FindContainer("app")
	if cs == nil || cs.State != nodekit.StateRunning || cs.ID.Type != "fakeRuntime" || cs.Hash != HashContainer(&pod.Spec.Containers[0]) {
		t.Fatalf("status = %+v", cs)
	}
	if len(st.Sandboxes) != 1 || st.Sandboxes[0].State != nodekit.SandboxReady || len(st.IPs) == 0 {
		t.Fatalf("sandboxes = %+v", st.Sandboxes)
	}

	pods, err := r.ListPods(t.Context(), false)
	if err != nil || len(pods) != 1 || len(pods[0].Containers) != 1 || pods[0].Containers[0].Name != "app" {
		t.Fatalf("ListPods = %+v, %v", pods, err)
	}

	// A second start of the same container is attempt 1 with its own log.
	res = r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Status: st, Actions: nodekit.PodActions{ContainersToStart: []int{0}}, Options: opts})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	st, _ = r.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
	if got := st.FindContainer("app").RestartCount; got != 1 {
		t.Errorf("restart count = %d, want 1", got)
	}
}

func TestPullPolicies(t *testing.T) {
	cases := []struct {
		name     string
		image    string
		policy   v1.PullPolicy
		present  bool
		pullErr  error
		want     error
		wantPull bool
	}{
		{name: "never, missing", image: "missing:1", policy: v1.PullNever, want: nodekit.ErrImageNeverPull},
		{name: "never, present", image: "here:1", policy: v1.PullNever, present: true},
		{name: "ifnotpresent, present", image: "here:1", policy: v1.PullIfNotPresent, present: true},
		{name: "ifnotpresent, missing", image: "new:1", policy: v1.PullIfNotPresent, wantPull: true},
		{name: "always, present", image: "here:1", policy: v1.PullAlways, present: true, wantPull: true},
		{name: "pull fails", image: "nope:1", policy: v1.PullAlways, pullErr: errors.New("registry unreachable"), want: nodekit.ErrImagePull},
		{name: "invalid name", image: "UPPER/Case", policy: v1.PullAlways, want: nodekit.ErrInvalidImageName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _, is := newFake(t)
			if tc.present {
				is.SetFakeImages([]string{tc.image})
			}
			if tc.pullErr != nil {
				is.InjectError("PullImage", tc.pullErr)
			}
			pod := testPod(v1.Container{Name: "c", Image: tc.image, ImagePullPolicy: tc.policy})
			res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
			err := res.Err()
			if tc.want == nil && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("error %v is not %v", err, tc.want)
				}
				if f := res.Failure("c"); f == nil || f.Message == "" {
					t.Fatalf("no failure with message for container c: %+v", res)
				}
			}
			pulled := false
			for _, c := range is.Called {
				pulled = pulled || c == "PullImage"
			}
			if pulled != tc.wantPull && tc.pullErr == nil {
				t.Errorf("pulled = %v, want %v", pulled, tc.wantPull)
			}
		})
	}
}

func TestCreateContainerConfigError(t *testing.T) {
	r, rs, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1"})
	pod := testPod(v1.Container{Name: "c", Image: "busybox:1"})
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{
		Pod:     pod,
		Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
		Options: func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
			return nil, errors.New(`couldn't find key k in ConfigMap default/cm`)
		},
	})
	f := res.Failure("c")
	if f == nil || f.Reason != nodekit.ErrCreateContainerConfig || f.Message != "couldn't find key k in ConfigMap default/cm" {
		t.Fatalf("failure = %+v", f)
	}
	if len(rs.Containers) != 0 {
		t.Errorf("a container was created despite the config error")
	}
}

func TestRunAsNonRoot(t *testing.T) {
	r, _, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1"})
	yes := true
	pod := testPod(v1.Container{Name: "c", Image: "busybox:1", SecurityContext: &v1.SecurityContext{RunAsNonRoot: &yes}})
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	if !errors.Is(res.Err(), nodekit.ErrCreateContainerConfig) {
		t.Fatalf("root image with runAsNonRoot: %v", res.Err())
	}
	uid := int64(1000)
	pod.Spec.Containers[0].SecurityContext.RunAsUser = &uid
	res = r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	if err := res.Err(); err != nil {
		t.Fatalf("runAsUser 1000: %v", err)
	}
}

func TestKillPodStopsContainersAndSandbox(t *testing.T) {
	r, rs, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1"})
	grace := int64(1)
	pod := testPod(v1.Container{Name: "a", Image: "busybox:1"}, v1.Container{Name: "b", Image: "busybox:1"})
	pod.Spec.TerminationGracePeriodSeconds = &grace
	if err := r.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}}).Err(); err != nil {
		t.Fatal(err)
	}
	running, _ := r.ListPods(t.Context(), false)
	if err := r.KillPod(t.Context(), nodekit.KillPodRequest{Pod: pod, Running: running[0]}); err != nil {
		t.Fatal(err)
	}
	after, _ := r.ListPods(t.Context(), false)
	if len(after) != 0 {
		t.Fatalf("still running after KillPod: %+v", after[0])
	}
	stops := 0
	for _, c := range rs.Called {
		if c == "StopContainer" {
			stops++
		}
	}
	if stops != 2 {
		t.Errorf("StopContainer called %d times, want 2", stops)
	}
	// Killing again is fine.
	if err := r.KillPod(t.Context(), nodekit.KillPodRequest{Pod: pod, Running: running[0]}); err != nil {
		t.Fatalf("second KillPod: %v", err)
	}
}

func TestGracePeriod(t *testing.T) {
	s := func(v int64) *int64 { return &v }
	d := func(v time.Duration) *time.Duration { return &v }
	withSpec := &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: s(45)}}
	deleting := &v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: s(10)}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: s(45)}}
	cases := []struct {
		name     string
		pod      *v1.Pod
		recorded *int64
		override *time.Duration
		want     time.Duration
	}{
		{"spec", withSpec, nil, nil, 45 * time.Second},
		{"deletion wins over spec", deleting, nil, nil, 10 * time.Second},
		{"override wins", deleting, nil, d(3 * time.Second), 3 * time.Second},
		{"floor of 2s", withSpec, nil, d(0), 2 * time.Second},
		{"orphan uses recorded", nil, s(7), nil, 7 * time.Second},
		{"nothing known", nil, nil, nil, 30 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := gracePeriod(tc.pod, tc.recorded, tc.override); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNormalizeImage(t *testing.T) {
	cases := map[string]string{
		"busybox":                       "busybox:latest",
		"busybox:1.36":                  "busybox:1.36",
		"registry.k8s.io/pause:3.10.1":  "registry.k8s.io/pause:3.10.1",
		"localhost:5000/team/app":       "localhost:5000/team/app:latest",
		"repo@sha256:" + sixtyFourHex(): "repo@sha256:" + sixtyFourHex(),
	}
	for in, want := range cases {
		got, err := normalizeImage(in)
		if err != nil || got != want {
			t.Errorf("normalizeImage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Busybox", "a b", "repo:", ":tag", "repo@sha256:xyz"} {
		if _, err := normalizeImage(bad); err == nil {
			t.Errorf("normalizeImage(%q) accepted an invalid name", bad)
		}
	}
}

func sixtyFourHex() string {
	return "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

func TestCredentialsFor(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("bob:s3cret"))
	secrets := []v1.Secret{
		{Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"https://registry.example.com":{"auth":"` + auth + `"},"other.io":{"username":"x","password":"y"}}}`)}},
		{Data: map[string][]byte{v1.DockerConfigKey: []byte(`{"index.docker.io":{"username":"hub","password":"pw"}}`)}},
		{Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`not json`)}},
	}
	got := credentialsFor("registry.example.com/app:1", secrets)
	if len(got) != 1 || got[0].Username != "bob" || got[0].Password != "s3cret" {
		t.Errorf("registry.example.com: %+v", got)
	}
	got = credentialsFor("library/busybox", secrets)
	if len(got) != 1 || got[0].Username != "hub" {
		t.Errorf("docker hub: %+v", got)
	}
	if got := credentialsFor("quay.io/x/y", secrets); len(got) != 0 {
		t.Errorf("quay.io: %+v", got)
	}
}

func TestCgroupDriver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		linux   *runtimeapi.LinuxRuntimeConfiguration
		err     error
		want    string
		wantErr bool
	}{
		{name: "systemd", linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD}, want: CgroupDriverSystemd},
		{name: "cgroupfs", linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}, want: CgroupDriverCgroupfs},
		{name: "no linux section", want: ""},
		{name: "unimplemented (containerd 1.6)", err: status.Error(codes.Unimplemented, "unknown method RuntimeConfig"), want: ""},
		{name: "unavailable", err: status.Error(codes.Unavailable, "connection refused"), wantErr: true},
		{name: "unknown driver", linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: 7}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rs, _ := newFake(t)
			rs.FakeLinuxConfiguration = tc.linux
			if tc.err != nil {
				rs.InjectError("RuntimeConfig", tc.err)
			}
			got, err := r.CgroupDriver(t.Context())
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("CgroupDriver = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
