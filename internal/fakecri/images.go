package fakecri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
)

// imageServer is ImageService v1 over upstream's FakeImageService: images
// are present or pulled at once, under their own names as IDs.
type imageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	f *critest.FakeImageService
}

func (s *imageServer) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	s.f.Lock()
	if len(s.f.Called) > maxCalls {
		s.f.Called = s.f.Called[:0]
	}
	s.f.Unlock()
	imgs, err := s.f.ListImages(ctx, req.Filter)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.ListImagesResponse{Images: imgs}, nil
}

func (s *imageServer) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	if req.Image == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	resp, err := s.f.ImageStatus(ctx, req.Image, req.Verbose)
	return resp, grpcError(err)
}

func (s *imageServer) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	if req.Image == nil {
		return &runtimeapi.PullImageResponse{}, nil
	}
	ref, err := s.f.PullImage(ctx, req.Image, req.Auth, req.SandboxConfig)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
}

func (s *imageServer) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	if req.Image == nil {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	if err := s.f.RemoveImage(ctx, req.Image); err != nil {
		return nil, grpcError(err)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (s *imageServer) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	resp, err := s.f.ImageFsInfo(ctx)
	return resp, grpcError(err)
}
