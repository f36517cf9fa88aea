package criruntime

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// Metrics receives the runtime's numbers (server.AgentMetrics satisfies
// it): every CRI call, every successful image pull, and every attempt to
// run a sandbox or start a container.
type Metrics interface {
	// ObserveRuntimeOperation records one CRI call under upstream's
	// operation_type (run_podsandbox, create_container, pull_image, ...).
	ObserveRuntimeOperation(operation string, d time.Duration, err error)
	// ObserveImagePull records a successful pull for a pod: the image's
	// size, when the pull was asked for and when it finished.
	ObserveImagePull(pod types.UID, sizeBytes uint64, asked, finished time.Time)
	// StartedPod counts an attempt to run a pod sandbox (err: its failure).
	StartedPod(err error)
	// StartedContainer counts an attempt to start a container of
	// containerType (container, init_container, ephemeral_container);
	// failure is the reason it failed with, "" for none.
	StartedContainer(containerType, failure string)
}

// ImageVolumeMetrics is an optional capability of Metrics: upstream's
// image volume counters (kubelet_image_volume_requested_total,
// _mounted_succeed_total, _mounted_errors_total).
type ImageVolumeMetrics interface {
	// ImageVolumeMounts records one container start that got this far
	// with its image volumes pulled: requested is how many image volumes
	// it mounts, succeeded and failed its image volume mounts by outcome.
	ImageVolumeMounts(requested, succeeded, failed int)
}

// noMetrics discards the numbers when Config.Metrics is nil.
type noMetrics struct{}

func (noMetrics) ObserveRuntimeOperation(string, time.Duration, error)     {}
func (noMetrics) ObserveImagePull(types.UID, uint64, time.Time, time.Time) {}
func (noMetrics) StartedPod(error)                                         {}
func (noMetrics) StartedContainer(string, string)                          {}

var _ Metrics = noMetrics{}

// timer times the calls of one instrumented service.
type timer struct {
	m   Metrics
	clk clock.PassiveClock
}

func timed[T any](t timer, op string, call func() (T, error)) (T, error) {
	start := t.clk.Now()
	v, err := call()
	t.m.ObserveRuntimeOperation(op, t.clk.Since(start), err)
	return v, err
}

func (t timer) do(op string, call func() error) error {
	_, err := timed(t, op, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// timedRuntime is a RuntimeService that reports each call to Metrics,
// named as upstream kubelet names its runtime operations.
type timedRuntime struct {
	internalapi.RuntimeService
	t timer
}

var _ internalapi.RuntimeService = timedRuntime{}

func (r timedRuntime) Version(ctx context.Context, v string) (*runtimeapi.VersionResponse, error) {
	return timed(r.t, "version", func() (*runtimeapi.VersionResponse, error) { return r.RuntimeService.Version(ctx, v) })
}

func (r timedRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return timed(r.t, "status", func() (*runtimeapi.StatusResponse, error) { return r.RuntimeService.Status(ctx, verbose) })
}

func (r timedRuntime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return timed(r.t, "runtime_config", func() (*runtimeapi.RuntimeConfigResponse, error) { return r.RuntimeService.RuntimeConfig(ctx) })
}

func (r timedRuntime) UpdateRuntimeConfig(ctx context.Context, c *runtimeapi.RuntimeConfig) error {
	return r.t.do("update_runtime_config", func() error { return r.RuntimeService.UpdateRuntimeConfig(ctx, c) })
}

func (r timedRuntime) CreateContainer(ctx context.Context, sb string, c *runtimeapi.ContainerConfig, sc *runtimeapi.PodSandboxConfig) (string, error) {
	return timed(r.t, "create_container", func() (string, error) { return r.RuntimeService.CreateContainer(ctx, sb, c, sc) })
}

func (r timedRuntime) StartContainer(ctx context.Context, id string) error {
	return r.t.do("start_container", func() error { return r.RuntimeService.StartContainer(ctx, id) })
}

func (r timedRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	return r.t.do("stop_container", func() error { return r.RuntimeService.StopContainer(ctx, id, timeout) })
}

func (r timedRuntime) RemoveContainer(ctx context.Context, id string) error {
	return r.t.do("remove_container", func() error { return r.RuntimeService.RemoveContainer(ctx, id) })
}

func (r timedRuntime) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return timed(r.t, "list_containers", func() ([]*runtimeapi.Container, error) { return r.RuntimeService.ListContainers(ctx, f) })
}

func (r timedRuntime) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return timed(r.t, "container_status", func() (*runtimeapi.ContainerStatusResponse, error) {
		return r.RuntimeService.ContainerStatus(ctx, id, verbose)
	})
}

func (r timedRuntime) UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.ContainerResources) error {
	return r.t.do("update_container", func() error { return r.RuntimeService.UpdateContainerResources(ctx, id, res) })
}

func (r timedRuntime) ReopenContainerLog(ctx context.Context, id string) error {
	return r.t.do("reopen_container_log", func() error { return r.RuntimeService.ReopenContainerLog(ctx, id) })
}

func (r timedRuntime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	var stderr []byte
	stdout, err := timed(r.t, "exec_sync", func() ([]byte, error) {
		out, errOut, err := r.RuntimeService.ExecSync(ctx, id, cmd, timeout)
		stderr = errOut
		return out, err
	})
	return stdout, stderr, err
}

func (r timedRuntime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return timed(r.t, "exec", func() (*runtimeapi.ExecResponse, error) { return r.RuntimeService.Exec(ctx, req) })
}

func (r timedRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return timed(r.t, "attach", func() (*runtimeapi.AttachResponse, error) { return r.RuntimeService.Attach(ctx, req) })
}

func (r timedRuntime) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error {
	return r.t.do("checkpoint_container", func() error { return r.RuntimeService.CheckpointContainer(ctx, req) })
}

func (r timedRuntime) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, cb func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	return r.t.do("get_container_events", func() error { return r.RuntimeService.GetContainerEvents(ctx, ch, cb) })
}

func (r timedRuntime) RunPodSandbox(ctx context.Context, c *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	return timed(r.t, "run_podsandbox", func() (string, error) { return r.RuntimeService.RunPodSandbox(ctx, c, handler) })
}

func (r timedRuntime) StopPodSandbox(ctx context.Context, id string) error {
	return r.t.do("stop_podsandbox", func() error { return r.RuntimeService.StopPodSandbox(ctx, id) })
}

func (r timedRuntime) RemovePodSandbox(ctx context.Context, id string) error {
	return r.t.do("remove_podsandbox", func() error { return r.RuntimeService.RemovePodSandbox(ctx, id) })
}

func (r timedRuntime) PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return timed(r.t, "podsandbox_status", func() (*runtimeapi.PodSandboxStatusResponse, error) {
		return r.RuntimeService.PodSandboxStatus(ctx, id, verbose)
	})
}

func (r timedRuntime) ListPodSandbox(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return timed(r.t, "list_podsandbox", func() ([]*runtimeapi.PodSandbox, error) { return r.RuntimeService.ListPodSandbox(ctx, f) })
}

func (r timedRuntime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return timed(r.t, "port_forward", func() (*runtimeapi.PortForwardResponse, error) { return r.RuntimeService.PortForward(ctx, req) })
}

func (r timedRuntime) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return timed(r.t, "update_podsandbox_resources", func() (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
		return r.RuntimeService.UpdatePodSandboxResources(ctx, req)
	})
}

func (r timedRuntime) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) error {
	return r.t.do("checkpoint_pod", func() error { return r.RuntimeService.CheckpointPod(ctx, req) })
}

func (r timedRuntime) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return timed(r.t, "restore_pod", func() (*runtimeapi.RestorePodResponse, error) { return r.RuntimeService.RestorePod(ctx, req) })
}

func (r timedRuntime) ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error) {
	return timed(r.t, "container_stats", func() (*runtimeapi.ContainerStats, error) { return r.RuntimeService.ContainerStats(ctx, id) })
}

func (r timedRuntime) ListContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return timed(r.t, "list_container_stats", func() ([]*runtimeapi.ContainerStats, error) {
		return r.RuntimeService.ListContainerStats(ctx, f)
	})
}

func (r timedRuntime) PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	return timed(r.t, "podsandbox_stats", func() (*runtimeapi.PodSandboxStats, error) { return r.RuntimeService.PodSandboxStats(ctx, id) })
}

func (r timedRuntime) ListPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return timed(r.t, "list_podsandbox_stats", func() ([]*runtimeapi.PodSandboxStats, error) {
		return r.RuntimeService.ListPodSandboxStats(ctx, f)
	})
}

func (r timedRuntime) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return timed(r.t, "list_metric_descriptors", func() ([]*runtimeapi.MetricDescriptor, error) {
		return r.RuntimeService.ListMetricDescriptors(ctx)
	})
}

func (r timedRuntime) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return timed(r.t, "list_podsandbox_metrics", func() ([]*runtimeapi.PodSandboxMetrics, error) {
		return r.RuntimeService.ListPodSandboxMetrics(ctx)
	})
}

// timedImages is an ImageManagerService that reports each call to
// Metrics.
type timedImages struct {
	internalapi.ImageManagerService
	t timer
}

var _ internalapi.ImageManagerService = timedImages{}

func (s timedImages) ListImages(ctx context.Context, f *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return timed(s.t, "list_images", func() ([]*runtimeapi.Image, error) { return s.ImageManagerService.ListImages(ctx, f) })
}

func (s timedImages) ImageStatus(ctx context.Context, img *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return timed(s.t, "image_status", func() (*runtimeapi.ImageStatusResponse, error) {
		return s.ImageManagerService.ImageStatus(ctx, img, verbose)
	})
}

func (s timedImages) PullImage(ctx context.Context, img *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sc *runtimeapi.PodSandboxConfig) (string, error) {
	return timed(s.t, "pull_image", func() (string, error) { return s.ImageManagerService.PullImage(ctx, img, auth, sc) })
}

func (s timedImages) RemoveImage(ctx context.Context, img *runtimeapi.ImageSpec) error {
	return s.t.do("remove_image", func() error { return s.ImageManagerService.RemoveImage(ctx, img) })
}

func (s timedImages) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return timed(s.t, "image_fs_info", func() (*runtimeapi.ImageFsInfoResponse, error) { return s.ImageManagerService.ImageFsInfo(ctx) })
}

// containerType is upstream's container_type label of a container the
// pod's spec starts.
func containerType(podEphemeral func(string) bool, name string, init bool) string {
	switch {
	case init:
		return "init_container"
	case podEphemeral(name):
		return "ephemeral_container"
	}
	return "container"
}

// isEphemeral tells the pod's ephemeral containers by name.
func isEphemeral(pod *v1.Pod) func(string) bool {
	return func(name string) bool {
		for i := range pod.Spec.EphemeralContainers {
			if pod.Spec.EphemeralContainers[i].Name == name {
				return true
			}
		}
		return false
	}
}

// failureReason is the reason of a failed start (upstream's code label:
// ErrImagePull, CreateContainerError, ...), "" for success.
func failureReason(err error) string {
	if err == nil {
		return ""
	}
	var ae *nodekit.ActionError
	if errors.As(err, &ae) && ae.Reason != "" {
		return string(ae.Reason)
	}
	return "Unknown"
}
