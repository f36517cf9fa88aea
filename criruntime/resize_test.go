package criruntime

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
)

// updateRecorder keeps what UpdateContainerResources was sent.
type updateRecorder struct {
	*recordingRuntime
	updates map[string]*runtimeapi.ContainerResources
}

func (u *updateRecorder) UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.ContainerResources) error {
	u.updates[id] = res
	return u.recordingRuntime.UpdateContainerResources(ctx, id, res)
}

func TestResizeContainerSendsCPUAndMemory(t *testing.T) {
	_, rs, is := newFake(t)
	u := &updateRecorder{recordingRuntime: rs, updates: map[string]*runtimeapi.ContainerResources{}}
	r, err := NewFromServices(t.Context(), u, is, Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	cases := []struct {
		name string
		res  v1.ResourceRequirements
		want *runtimeapi.LinuxContainerResources
	}{
		{
			name: "requests and limits",
			res: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: q("250m"), v1.ResourceMemory: q("64Mi")},
				Limits:   v1.ResourceList{v1.ResourceCPU: q("500m"), v1.ResourceMemory: q("128Mi")},
			},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20},
		},
		{
			name: "no limits: lifted, minimum shares",
			res:  v1.ResourceRequirements{},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: -1, MemoryLimitInBytes: -1},
		},
		{
			name: "limit only: shares from the limit",
			res:  v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: q("1")}},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: -1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := nodekit.ContainerID{Type: "fake", ID: "c-" + tc.name}
			if err := r.ResizeContainer(t.Context(), id, tc.res); err != nil {
				t.Fatal(err)
			}
			got := u.updates[id.ID].GetLinux()
			if got.CpuShares != tc.want.CpuShares || got.CpuPeriod != tc.want.CpuPeriod || got.CpuQuota != tc.want.CpuQuota ||
				got.MemoryLimitInBytes != tc.want.MemoryLimitInBytes || got.CpusetCpus != "" {
				t.Fatalf("sent %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestNoCFSQuota checks cpuCFSQuota: false (Config.DisableCPUCFSQuota):
// a CPU limit gives the container no CFS quota or period, neither at
// creation nor on a resize, while shares and the memory limit still
// follow the spec.
func TestNoCFSQuota(t *testing.T) {
	_, rs, is := newFake(t)
	u := &updateRecorder{recordingRuntime: rs, updates: map[string]*runtimeapi.ContainerResources{}}
	r, err := NewFromServices(t.Context(), u, is, Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir(), DisableCPUCFSQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	res := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q("250m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: q("500m"), v1.ResourceMemory: q("64Mi")},
	}
	c := &v1.Container{Name: "app", Resources: res}
	created := r.containerResources(nil, c, &nodekit.ContainerOptions{})
	if created.CpuQuota != 0 || created.CpuPeriod != 0 || created.CpuShares != 256 || created.MemoryLimitInBytes != 64<<20 {
		t.Errorf("created with %v, want shares 256, memory 64Mi, no quota or period", created)
	}
	id := nodekit.ContainerID{Type: "fake", ID: "c1"}
	if err := r.ResizeContainer(t.Context(), id, res); err != nil {
		t.Fatal(err)
	}
	sent := u.updates[id.ID].GetLinux()
	if sent.CpuQuota != 0 || sent.CpuPeriod != 0 || sent.CpuShares != 256 || sent.MemoryLimitInBytes != 64<<20 {
		t.Errorf("resize sent %v, want shares 256, memory 64Mi, no quota or period", sent)
	}
}

// TestPodLevelLimitsAtCreation: a container without CPU or memory limits
// of its own is created with the pod-level ones (spec.resources), as
// upstream; its own limits win over the pod's.
func TestPodLevelLimitsAtCreation(t *testing.T) {
	_, rs, is := newFake(t)
	r, err := NewFromServices(t.Context(), rs, is, Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	pod := &v1.Pod{Spec: v1.PodSpec{Resources: &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q("200m"), v1.ResourceMemory: q("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: q("400m"), v1.ResourceMemory: q("128Mi")},
	}}}
	bare := r.containerResources(pod, &v1.Container{Name: "bare"}, &nodekit.ContainerOptions{})
	if bare.CpuQuota != 40000 || bare.CpuShares != 409 || bare.MemoryLimitInBytes != 128<<20 {
		t.Errorf("container without limits created with %v, want quota 40000 (400m), shares 409 (the limit), memory 128Mi", bare)
	}
	own := &v1.Container{Name: "own", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: q("32Mi")}}}
	got := r.containerResources(pod, own, &nodekit.ContainerOptions{})
	if got.CpuQuota != 40000 || got.MemoryLimitInBytes != 32<<20 {
		t.Errorf("container with its own memory limit created with %v, want quota 40000 (the pod's), memory 32Mi (its own)", got)
	}
}

// TestUpdatePodSandboxResources: the pod's totals and its overhead are
// sent as upstream maps them; a runtime without the call (Unimplemented,
// or containerd 2.2's Unknown "not implemented") is no error, any other
// failure is.
func TestUpdatePodSandboxResources(t *testing.T) {
	_, rs, is := newFake(t)
	u := &sandboxRecorder{recordingRuntime: rs}
	r, err := NewFromServices(t.Context(), u, is, Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	res := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")},
	}
	overhead := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
	if err := r.UpdatePodSandboxResources(t.Context(), "sb1", res, overhead); err != nil {
		t.Fatal(err)
	}
	req := u.last
	if req == nil || req.PodSandboxId != "sb1" {
		t.Fatalf("request %+v, want one for sb1", req)
	}
	if got := req.Resources; got.CpuShares != 256 || got.CpuQuota != 50000 || got.CpuPeriod != 100000 || got.MemoryLimitInBytes != unlimited {
		t.Errorf("pod resources %+v: want shares 256, quota 50000 per 100000, memory unlimited", got)
	}
	if o := req.Overhead; o.CpuShares != 102 || o.CpuQuota != 10000 || o.MemoryLimitInBytes != 0 {
		t.Errorf("overhead %+v: want shares 102, quota 10000, no memory limit", o)
	}
	if err := r.UpdatePodSandboxResources(t.Context(), "sb1", res, nil); err != nil {
		t.Fatal(err)
	}
	if o := u.last.Overhead; o.CpuShares != 0 || o.CpuQuota != 0 || o.MemoryLimitInBytes != 0 {
		t.Errorf("no overhead: %+v, want empty", o)
	}
	for _, tc := range []struct {
		err    error
		wantOK bool
	}{
		{status.Error(codes.Unimplemented, "unknown method UpdatePodSandboxResources"), true},
		{status.Error(codes.Unknown, "not implemented yet"), true},
		{status.Error(codes.Unknown, "sandbox is gone"), false},
		{status.Error(codes.NotFound, "no sandbox sb1"), false},
	} {
		rs.InjectError("UpdatePodSandboxResources", tc.err)
		err := r.UpdatePodSandboxResources(t.Context(), "sb1", res, nil)
		if (err == nil) != tc.wantOK {
			t.Errorf("runtime answering %v: err = %v, want ok %v", tc.err, err, tc.wantOK)
		}
	}
}

// sandboxRecorder keeps the last UpdatePodSandboxResources request.
type sandboxRecorder struct {
	*recordingRuntime
	last *runtimeapi.UpdatePodSandboxResourcesRequest
}

func (u *sandboxRecorder) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	u.last = req
	return u.recordingRuntime.UpdatePodSandboxResources(ctx, req)
}
