package criruntime

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandboxStats returns the runtime's statistics of every pod
// sandbox (with their containers'). It blocks on the runtime. The result
// belongs to the caller.
func (r *Runtime) ListPodSandboxStats(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error) {
	st, err := r.rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
	if err != nil {
		return nil, fmt.Errorf("criruntime: list pod sandbox stats: %w", err)
	}
	return st, nil
}

// ListContainerStats returns the runtime's statistics of every container.
// It blocks on the runtime. The result belongs to the caller.
func (r *Runtime) ListContainerStats(ctx context.Context) ([]*runtimeapi.ContainerStats, error) {
	st, err := r.rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
	if err != nil {
		return nil, fmt.Errorf("criruntime: list container stats: %w", err)
	}
	return st, nil
}

// ImageFsInfo returns the usage of the filesystems holding images (and,
// on runtimes that split them, container writable layers). It blocks on
// the image service.
func (r *Runtime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	resp, err := r.is.ImageFsInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("criruntime: image fs info: %w", err)
	}
	return resp, nil
}

// ListImages returns every image the runtime holds. It blocks on the image
// service. The result belongs to the caller.
func (r *Runtime) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	imgs, err := r.is.ListImages(ctx, &runtimeapi.ImageFilter{})
	if err != nil {
		return nil, fmt.Errorf("criruntime: list images: %w", err)
	}
	return imgs, nil
}

// RemoveImage removes the image with the given ID (or reference). Removing
// an image that is already gone succeeds, as CRI specifies.
func (r *Runtime) RemoveImage(ctx context.Context, id string) error {
	if err := r.is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: id}); err != nil {
		return fmt.Errorf("criruntime: remove image %s: %w", id, err)
	}
	return nil
}
