package volumemgr

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// ImagePluginName is upstream's name of the image volume plugin.
const ImagePluginName = "kubernetes.io/image"

// imagePlugin: an OCI image mounted read-only by the container runtime
// (volumes[].image). There is nothing to set up on the host: the runtime
// pulls the image and the container runtime mounts it at container
// creation (nodekit.Mount.Image), so SetUp and TearDown only mark the
// volume ready, as upstream's stub plugin does.
type imagePlugin struct{}

func (*imagePlugin) Name() string                   { return ImagePluginName }
func (*imagePlugin) CanSupport(vol *v1.Volume) bool { return vol.Image != nil }

// SetUp makes no directory: the result's path is never mounted, as
// ContainerMounts gives image volumes no host path.
func (*imagePlugin) SetUp(context.Context, *SetUpRequest) (*SetUpResult, error) {
	return &SetUpResult{ReadOnly: true}, nil
}

// TearDown does nothing: the runtime unmounts the image with the container.
func (*imagePlugin) TearDown(context.Context, *TearDownRequest) error { return nil }
