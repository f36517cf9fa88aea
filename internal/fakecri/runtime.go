package fakecri

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"
)

// maxCalls bounds the fakes' record of calls (they append one entry per
// call for tests to assert on); a long bench would otherwise grow it
// without end.
const maxCalls = 4096

// runtimeServer is RuntimeService v1 over upstream's FakeRuntimeService.
type runtimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	f            *critest.FakeRuntimeService
	sandboxImage string
	fsDir        string // the image filesystem's mount point
	clock        clock.PassiveClock

	mu     sync.Mutex // guards pool and nextIP
	pool   netip.Prefix
	nextIP netip.Addr
}

func newRuntimeServer(f *critest.FakeRuntimeService, pool netip.Prefix, sandboxImage, fsDir string, clk clock.PassiveClock) *runtimeServer {
	pool = pool.Masked()
	return &runtimeServer{f: f, sandboxImage: sandboxImage, fsDir: fsDir, clock: clk, pool: pool, nextIP: pool.Addr().Next()}
}

// podIP hands out the pool's addresses in order, skipping the network and
// broadcast addresses, and starts over when the pool is used up.
func (s *runtimeServer) podIP() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := s.nextIP
	next := ip.Next()
	if !s.pool.Contains(next.Next()) { // next is the broadcast address or beyond
		next = s.pool.Addr().Next()
	}
	s.nextIP = next
	return ip.String()
}

// grpcError gives the fakes' "... not found" errors the NotFound code a
// real runtime answers with, which agents test for.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if strings.Contains(err.Error(), "not found") {
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

func (s *runtimeServer) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	v, err := s.f.Version(ctx, req.Version)
	if err != nil {
		return nil, grpcError(err)
	}
	// kubelet wants Version 0.1.0, as the fakes say; the name and the API
	// version are a real runtime's.
	return &runtimeapi.VersionResponse{Version: v.Version, RuntimeName: RuntimeName, RuntimeVersion: v.RuntimeVersion, RuntimeApiVersion: "v1"}, nil
}

func (s *runtimeServer) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	st, err := s.f.Status(ctx, req.Verbose)
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &runtimeapi.StatusResponse{Status: st.Status, RuntimeHandlers: runtimeHandlers(),
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}}
	if req.Verbose {
		b, _ := json.Marshal(map[string]string{"sandboxImage": s.sandboxImage})
		resp.Info = map[string]string{"config": string(b)}
	}
	return resp, nil
}

func (s *runtimeServer) RuntimeConfig(ctx context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	resp, err := s.f.RuntimeConfig(ctx)
	return resp, grpcError(err)
}

func (s *runtimeServer) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	if err := s.f.UpdateRuntimeConfig(ctx, req.RuntimeConfig); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

func (s *runtimeServer) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	if req.Config == nil || req.Config.Metadata == nil {
		return nil, status.Error(codes.InvalidArgument, "sandbox config metadata is empty")
	}
	id, err := s.f.RunPodSandbox(ctx, req.Config, req.RuntimeHandler)
	if err != nil {
		return nil, grpcError(err)
	}
	ip := s.podIP()
	s.f.Lock()
	if sb := s.f.Sandboxes[id]; sb != nil {
		sb.Network.Ip = ip
	}
	s.f.Unlock()
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// StopPodSandbox stops the sandbox's containers first, as a real runtime
// does. A sandbox that is gone is stopped already.
func (s *runtimeServer) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	s.f.Lock()
	_, known := s.f.Sandboxes[req.PodSandboxId]
	now := s.clock.Now().UnixNano()
	for _, c := range s.f.Containers {
		if c.SandboxID == req.PodSandboxId {
			exit(c, now)
		}
	}
	s.f.Unlock()
	if !known {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err := s.f.StopPodSandbox(ctx, req.PodSandboxId); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes the sandbox's containers too, as a real
// runtime does.
func (s *runtimeServer) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	s.f.Lock()
	for id, c := range s.f.Containers {
		if c.SandboxID == req.PodSandboxId {
			delete(s.f.Containers, id)
		}
	}
	s.f.Unlock()
	if err := s.f.RemovePodSandbox(ctx, req.PodSandboxId); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (s *runtimeServer) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	resp, err := s.f.PodSandboxStatus(ctx, req.PodSandboxId, req.Verbose)
	return resp, grpcError(err)
}

func (s *runtimeServer) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.f.Lock()
	if len(s.f.Called) > maxCalls {
		s.f.Called = s.f.Called[:0]
	}
	s.f.Unlock()
	items, err := s.f.ListPodSandbox(ctx, req.Filter)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// CreateContainer refuses a sandbox that does not exist, and creates the
// container's (empty) log file where the agent asked for it.
func (s *runtimeServer) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if req.Config == nil || req.Config.Metadata == nil || req.Config.Image == nil {
		return nil, status.Error(codes.InvalidArgument, "container config metadata or image is empty")
	}
	s.f.Lock()
	_, known := s.f.Sandboxes[req.PodSandboxId]
	s.f.Unlock()
	if !known {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.PodSandboxId)
	}
	id, err := s.f.CreateContainer(ctx, req.PodSandboxId, req.Config, req.SandboxConfig)
	if err != nil {
		return nil, grpcError(err)
	}
	var logPath string
	if dir, name := req.SandboxConfig.GetLogDirectory(), req.Config.LogPath; dir != "" && name != "" {
		logPath = filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "container log directory: %v", err)
		}
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "container log: %v", err)
		}
		_ = f.Close()
	}
	s.f.Lock()
	if c := s.f.Containers[id]; c != nil {
		c.LogPath = logPath
	}
	s.f.Unlock()
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (s *runtimeServer) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	if err := s.f.StartContainer(ctx, req.ContainerId); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

// StopContainer exits a created or running container with StopExitCode; an
// exited one keeps its exit.
func (s *runtimeServer) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	s.f.Lock()
	defer s.f.Unlock()
	s.f.Called = append(s.f.Called, "StopContainer")
	c := s.f.Containers[req.ContainerId]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	exit(c, s.clock.Now().UnixNano())
	return &runtimeapi.StopContainerResponse{}, nil
}

// exit ends a container that has not exited yet; the caller holds the
// fake's lock.
func exit(c *critest.FakeContainer, now int64) {
	if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.FinishedAt = now
	c.ExitCode = StopExitCode
	c.Reason = "Error"
}

func (s *runtimeServer) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	if err := s.f.RemoveContainer(ctx, req.ContainerId); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (s *runtimeServer) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	cs, err := s.f.ListContainers(ctx, req.Filter)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ListContainersResponse{Containers: cs}, nil
}

func (s *runtimeServer) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	resp, err := s.f.ContainerStatus(ctx, req.ContainerId, req.Verbose)
	return resp, grpcError(err)
}

// UpdateContainerResources records the resources in the container's
// status, as a runtime that applied them reports them.
func (s *runtimeServer) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	res := &runtimeapi.ContainerResources{Linux: req.Linux}
	if err := s.f.UpdateContainerResources(ctx, req.ContainerId, res); err != nil {
		return nil, grpcError(err)
	}
	s.f.Lock()
	defer s.f.Unlock()
	c := s.f.Containers[req.ContainerId]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	if req.Linux != nil {
		c.LinuxResources = req.Linux
		c.Resources = res
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (s *runtimeServer) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	resp, err := s.f.UpdatePodSandboxResources(ctx, req)
	return resp, grpcError(err)
}

func (s *runtimeServer) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	if err := s.f.ReopenContainerLog(ctx, req.ContainerId); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// ExecSync runs nothing and succeeds with no output (exec probes pass).
func (s *runtimeServer) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	stdout, stderr, err := s.f.ExecSync(ctx, req.ContainerId, req.Cmd, time.Duration(req.Timeout)*time.Second)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr}, nil
}

func (s *runtimeServer) ListMetricDescriptors(ctx context.Context, _ *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	d, err := s.f.ListMetricDescriptors(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: d}, nil
}

func (s *runtimeServer) ListPodSandboxMetrics(ctx context.Context, _ *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	m, err := s.f.ListPodSandboxMetrics(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: m}, nil
}
