package podresources

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"
)

type fakePods []*v1.Pod

func (f fakePods) ActivePods() []*v1.Pod { return f }

// fakeResources answers from maps keyed by pod UID + "/" + container.
type fakeResources struct {
	cpus    map[string][]int64
	memory  map[string][]*api.ContainerMemory
	devices map[string][]*api.ContainerDevices
	dra     map[string][]*api.DynamicResource
}

var (
	_ CPUProvider              = (*fakeResources)(nil)
	_ MemoryProvider           = (*fakeResources)(nil)
	_ DeviceProvider           = (*fakeResources)(nil)
	_ DynamicResourcesProvider = (*fakeResources)(nil)
)

func key(uid types.UID, c string) string { return string(uid) + "/" + c }

func (f *fakeResources) ContainerCPUs(uid types.UID, c string) []int64 { return f.cpus[key(uid, c)] }
func (f *fakeResources) AllocatableCPUs() []int64                      { return []int64{1, 2, 3} }
func (f *fakeResources) ContainerMemory(uid types.UID, c string) []*api.ContainerMemory {
	return f.memory[key(uid, c)]
}
func (f *fakeResources) AllocatableMemory() []*api.ContainerMemory {
	return []*api.ContainerMemory{Memory("memory", 1<<30, []int{0})}
}
func (f *fakeResources) ContainerDevices(uid types.UID, c string) []*api.ContainerDevices {
	return f.devices[key(uid, c)]
}
func (f *fakeResources) AllocatableDevices() []*api.ContainerDevices {
	return []*api.ContainerDevices{{ResourceName: "example.com/dev", DeviceIds: []string{"d0"}}}
}
func (f *fakeResources) DynamicResources(p *v1.Pod, c *v1.Container) []*api.DynamicResource {
	return f.dra[key(p.UID, c.Name)]
}

func testPod() *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: &always}},
			Containers:     []v1.Container{{Name: "main"}},
		},
	}
}

func testServer(t *testing.T, pods ...*v1.Pod) (*Server, *fakeResources) {
	t.Helper()
	f := &fakeResources{
		cpus:    map[string][]int64{"u1/main": {2, 3}},
		memory:  map[string][]*api.ContainerMemory{"u1/main": {Memory("memory", 1<<20, []int{0})}},
		devices: map[string][]*api.ContainerDevices{"u1/sidecar": {{ResourceName: "example.com/dev", DeviceIds: []string{"d0"}}}},
		dra:     map[string][]*api.DynamicResource{"u1/main": {{ClaimName: "c", ClaimNamespace: "ns"}}},
	}
	s, err := New(Config{Pods: fakePods(pods), CPUs: f, Memory: f, Devices: f, DynamicResources: f})
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func wantPodResources() *api.PodResources {
	return &api.PodResources{Name: "p", Namespace: "ns", Containers: []*api.ContainerResources{
		{Name: "sidecar", Devices: []*api.ContainerDevices{{ResourceName: "example.com/dev", DeviceIds: []string{"d0"}}}},
		{Name: "main", CpuIds: []int64{2, 3},
			Memory:           []*api.ContainerMemory{Memory("memory", 1<<20, []int{0})},
			DynamicResources: []*api.DynamicResource{{ClaimName: "c", ClaimNamespace: "ns"}}},
	}}
}

func TestListReportsSidecarsAndContainers(t *testing.T) {
	s, _ := testServer(t, testPod())
	resp, err := s.List(t.Context(), &api.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &api.ListPodResourcesResponse{PodResources: []*api.PodResources{wantPodResources()}}
	if !proto.Equal(resp, want) {
		t.Fatalf("List = %v\nwant %v", resp, want)
	}
}

func TestGet(t *testing.T) {
	s, _ := testServer(t, testPod())
	resp, err := s.Get(t.Context(), &api.GetPodResourcesRequest{PodName: "p", PodNamespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp.PodResources, wantPodResources()) {
		t.Fatalf("Get = %v, want %v", resp.PodResources, wantPodResources())
	}
	_, err = s.Get(t.Context(), &api.GetPodResourcesRequest{PodName: "q", PodNamespace: "ns"})
	if err == nil || err.Error() != "pod q in namespace ns not found" {
		t.Fatalf("Get of a pod not active: %v, want upstream's not found", err)
	}
}

func TestGetAllocatableResources(t *testing.T) {
	s, _ := testServer(t)
	resp, err := s.GetAllocatableResources(t.Context(), &api.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &api.AllocatableResourcesResponse{
		CpuIds:  []int64{1, 2, 3},
		Memory:  []*api.ContainerMemory{Memory("memory", 1<<30, []int{0})},
		Devices: []*api.ContainerDevices{{ResourceName: "example.com/dev", DeviceIds: []string{"d0"}}},
	}
	if !proto.Equal(resp, want) {
		t.Fatalf("GetAllocatableResources = %v, want %v", resp, want)
	}
}

func TestNilProvidersReportNothing(t *testing.T) {
	s, err := New(Config{Pods: fakePods{testPod()}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.List(t.Context(), &api.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &api.ListPodResourcesResponse{PodResources: []*api.PodResources{{Name: "p", Namespace: "ns",
		Containers: []*api.ContainerResources{{Name: "sidecar"}, {Name: "main"}}}}}
	if !proto.Equal(resp, want) {
		t.Fatalf("List = %v, want %v", resp, want)
	}
	alloc, err := s.GetAllocatableResources(t.Context(), &api.AllocatableResourcesRequest{})
	if err != nil || !proto.Equal(alloc, &api.AllocatableResourcesResponse{}) {
		t.Fatalf("GetAllocatableResources = %v, %v; want empty", alloc, err)
	}
}

func TestRateLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s, err := New(Config{Pods: fakePods{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for i := range DefaultBurst {
		if _, err := s.Limit(t.Context(), nil, nil, ok); err != nil {
			t.Fatalf("request %d of the burst: %v", i, err)
		}
	}
	_, err = s.Limit(t.Context(), nil, nil, ok)
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "rejected by rate limit" {
		t.Fatalf("request past the burst: %v, want ResourceExhausted rejected by rate limit", err)
	}
	clk.Step(time.Second / DefaultQPS) // one token back
	if _, err := s.Limit(t.Context(), nil, nil, ok); err != nil {
		t.Fatalf("request after a token came back: %v", err)
	}
}

func TestConvert(t *testing.T) {
	if got := CPUIDs(cpuset.New(5, 1, 3)); len(got) != 3 || got[0] != 1 || got[2] != 5 {
		t.Errorf("CPUIDs = %v, want [1 3 5]", got)
	}
	got := Devices(map[string]map[string]*pluginapi.Device{
		"b.com/x": {"x1": {ID: "x1"}},
		"a.com/y": {"y2": {ID: "y2", Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}, {ID: 1}}}}, "y1": {ID: "y1"}},
	})
	want := []*api.ContainerDevices{
		{ResourceName: "a.com/y", DeviceIds: []string{"y1"}},
		{ResourceName: "a.com/y", DeviceIds: []string{"y2"}, Topology: &api.TopologyInfo{Nodes: []*api.NUMANode{{ID: 0}}}},
		{ResourceName: "a.com/y", DeviceIds: []string{"y2"}, Topology: &api.TopologyInfo{Nodes: []*api.NUMANode{{ID: 1}}}},
		{ResourceName: "b.com/x", DeviceIds: []string{"x1"}},
	}
	if len(got) != len(want) {
		t.Fatalf("Devices = %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("Devices[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestServesOnSocket calls the service through its socket with the
// upstream generated client, as a monitoring agent does.
func TestServesOnSocket(t *testing.T) {
	d, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	dir := filepath.Join(d, "pod-resources")
	f := &fakeResources{cpus: map[string][]int64{"u1/main": {2, 3}}}
	s, err := New(Config{Dir: dir, Pods: fakePods{testPod()}, CPUs: f})
	if err != nil {
		t.Fatal(err)
	}
	ctx, conn := serveOnSocket(t, s)
	client := api.NewPodResourcesListerClient(conn)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	resp, err := client.List(cctx, &api.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.PodResources) != 1 || len(resp.PodResources[0].Containers) != 2 || len(resp.PodResources[0].Containers[1].CpuIds) != 2 {
		t.Fatalf("List over the socket = %v", resp)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("directory mode = %v (%v), want 0750", fi.Mode().Perm(), err)
	}
}

// serveOnSocket runs s until the test ends and returns a client
// connection to its socket, and the context it runs under.
func serveOnSocket(t *testing.T, s *Server) (context.Context, *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient("unix://"+s.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.SocketPath())
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ctx, conn
}
