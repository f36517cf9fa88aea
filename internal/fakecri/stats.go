package fakecri

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stats: every container and sandbox uses nothing, measured now. The
// fakes answer only for stats a test set; these are made per call from
// the containers and sandboxes there are.

func (s *runtimeServer) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	cs, err := s.f.ListContainers(ctx, &runtimeapi.ContainerFilter{Id: req.ContainerId})
	if err != nil {
		return nil, grpcError(err)
	}
	if len(cs) == 0 {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	return &runtimeapi.ContainerStatsResponse{Stats: s.containerStats(cs[0], s.clock.Now().UnixNano())}, nil
}

func (s *runtimeServer) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	var filter *runtimeapi.ContainerFilter
	if f := req.Filter; f != nil {
		filter = &runtimeapi.ContainerFilter{Id: f.Id, PodSandboxId: f.PodSandboxId, LabelSelector: f.LabelSelector}
	}
	cs, err := s.f.ListContainers(ctx, filter)
	if err != nil {
		return nil, grpcError(err)
	}
	now := s.clock.Now().UnixNano()
	out := make([]*runtimeapi.ContainerStats, 0, len(cs))
	for _, c := range cs {
		out = append(out, s.containerStats(c, now))
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

func (s *runtimeServer) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sbs, err := s.f.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: req.PodSandboxId})
	if err != nil {
		return nil, grpcError(err)
	}
	if len(sbs) == 0 {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.PodSandboxId)
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: sandboxStats(sbs[0], s.clock.Now().UnixNano())}, nil
}

func (s *runtimeServer) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	var filter *runtimeapi.PodSandboxFilter
	if f := req.Filter; f != nil {
		filter = &runtimeapi.PodSandboxFilter{Id: f.Id, LabelSelector: f.LabelSelector}
	}
	sbs, err := s.f.ListPodSandbox(ctx, filter)
	if err != nil {
		return nil, grpcError(err)
	}
	now := s.clock.Now().UnixNano()
	out := make([]*runtimeapi.PodSandboxStats, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, sandboxStats(sb, now))
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}

func (s *runtimeServer) containerStats(c *runtimeapi.Container, now int64) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations},
		Cpu:        cpu(now),
		Memory:     memory(now),
		WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: s.fsDir},
			UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{}},
	}
}

func sandboxStats(sb *runtimeapi.PodSandbox, now int64) *runtimeapi.PodSandboxStats {
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sb.Id, Metadata: sb.Metadata, Labels: sb.Labels, Annotations: sb.Annotations},
		Linux:      &runtimeapi.LinuxPodSandboxStats{Cpu: cpu(now), Memory: memory(now)},
	}
}

func cpu(now int64) *runtimeapi.CpuUsage {
	return &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}, UsageNanoCores: &runtimeapi.UInt64Value{}}
}

func memory(now int64) *runtimeapi.MemoryUsage {
	return &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{},
		RssBytes: &runtimeapi.UInt64Value{}, AvailableBytes: &runtimeapi.UInt64Value{}}
}
