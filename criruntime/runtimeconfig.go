package criruntime

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Cgroup drivers CgroupDriver reports, spelled as KubeletConfiguration's
// cgroupDriver.
const (
	CgroupDriverSystemd  = "systemd"
	CgroupDriverCgroupfs = "cgroupfs"
)

// CgroupDriver asks the runtime which cgroup driver it uses (CRI
// RuntimeConfig; upstream's KubeletCgroupDriverFromCRI): CgroupDriverSystemd
// or CgroupDriverCgroupfs. It returns "" and no error when the runtime does
// not say: it lacks the call (containerd 1.6 answers Unimplemented) or its
// answer has no Linux section. Any other failure, or a driver value this
// package does not know, is an error. One call, bounded by the request
// timeout; it does not retry.
func (r *Runtime) CgroupDriver(ctx context.Context) (string, error) {
	resp, err := r.rs.RuntimeConfig(ctx)
	if status.Code(err) == codes.Unimplemented {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("criruntime: runtime config: %w", err)
	}
	linux := resp.GetLinux()
	if linux == nil {
		return "", nil
	}
	switch d := linux.GetCgroupDriver(); d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return CgroupDriverSystemd, nil
	case runtimeapi.CgroupDriver_CGROUPFS:
		return CgroupDriverCgroupfs, nil
	default:
		return "", fmt.Errorf("criruntime: runtime config: unknown cgroup driver %d", d)
	}
}
