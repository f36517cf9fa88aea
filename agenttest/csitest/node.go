package csitest

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// ephemeralMarker marks a volume directory made by a publish without
// staging (an inline volume): it goes away with its unpublish.
const ephemeralMarker = ".ephemeral"

// NodeStageVolume creates the volume's directory and bind-mounts it on the
// staging path.
func (s *Server) NodeStageVolume(_ context.Context, r *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.GetVolumeId() == "" || r.GetStagingTargetPath() == "" || r.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, staging_target_path and volume_capability are required")
	}
	if err := s.enter("NodeStageVolume", r.GetVolumeId(), r.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := s.logSecrets("NodeStageVolume", r.GetVolumeId(), r.GetSecrets()); err != nil {
		return nil, err
	}
	if err := s.logMap(PublishContextLogFile, "NodeStageVolume", r.GetVolumeId(), r.GetPublishContext()); err != nil {
		return nil, err
	}
	if err := s.logMountFlags("NodeStageVolume", r.GetVolumeId(), r.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := s.logAccessMode("NodeStageVolume", r.GetVolumeId(), r.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if r.GetVolumeCapability().GetBlock() != nil {
		if _, err := s.attachBlock(r.GetVolumeId()); err != nil { // block.go
			return nil, err
		}
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	if s.cfg.StageTmpfs {
		if err := mountTmpfs(r.GetStagingTargetPath(), r.GetVolumeCapability().GetMount().GetMountFlags()); err != nil {
			return nil, err
		}
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	dir := s.volumeDir(r.GetVolumeId())
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := bindMount(dir, r.GetStagingTargetPath(), false); err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

// mountTmpfs mounts a new tmpfs on target with flags as its options
// (mount(8)'s -o: context="A,B" keeps its quotes, the kernel's SELinux
// option parser takes them), unless target is a mount point already.
func mountTmpfs(target string, flags []string) error {
	mounted, err := IsMountPoint(target)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return nil
	}
	if err := unix.Mount("csitest", target, "tmpfs", 0, strings.Join(flags, ",")); err != nil {
		return status.Errorf(codes.Internal, "mount tmpfs on %s with %q: %v", target, flags, err)
	}
	return nil
}

// NodeUnstageVolume unmounts the staging path.
func (s *Server) NodeUnstageVolume(_ context.Context, r *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter("NodeUnstageVolume", r.GetVolumeId(), r.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := unmount(r.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := s.detachBlock(r.GetVolumeId()); err != nil { // block.go
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume bind-mounts the staged volume (or its own directory
// when not staged) on the target path, which it creates.
func (s *Server) NodePublishVolume(_ context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.GetVolumeId() == "" || r.GetTargetPath() == "" || r.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, target_path and volume_capability are required")
	}
	if err := s.enter("NodePublishVolume", r.GetVolumeId(), r.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := s.logSecrets("NodePublishVolume", r.GetVolumeId(), r.GetSecrets()); err != nil {
		return nil, err
	}
	if err := s.logMap(PublishContextLogFile, "NodePublishVolume", r.GetVolumeId(), r.GetPublishContext()); err != nil {
		return nil, err
	}
	if err := s.logMountFlags("NodePublishVolume", r.GetVolumeId(), r.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := s.logAccessMode("NodePublishVolume", r.GetVolumeId(), r.GetVolumeCapability()); err != nil {
		return nil, err
	}
	ctxLog := maps.Clone(r.GetVolumeContext())
	group := r.GetVolumeCapability().GetMount().GetVolumeMountGroup()
	if group != "" {
		if ctxLog == nil {
			ctxLog = map[string]string{}
		}
		ctxLog["volume_mount_group"] = group
	}
	if err := s.logMap(ContextLogFile, "NodePublishVolume", r.GetVolumeId(), ctxLog); err != nil {
		return nil, err
	}
	if r.GetVolumeCapability().GetBlock() != nil {
		if err := s.publishBlock(r.GetVolumeId(), r.GetTargetPath(), r.GetReadonly()); err != nil { // block.go
			return nil, err
		}
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	src := r.GetStagingTargetPath()
	if src == "" {
		src = s.volumeDir(r.GetVolumeId())
		if err := os.MkdirAll(src, 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.WriteFile(filepath.Join(s.cfg.StateDir, "volumes", filepath.Base(src)+ephemeralMarker), nil, 0o640); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.MkdirAll(r.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := bindMount(src, r.GetTargetPath(), r.GetReadonly()); err != nil {
		return nil, err
	}
	if group != "" && s.cfg.VolumeMountGroup && !r.GetReadonly() {
		gid, err := strconv.Atoi(group)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume_mount_group %q: %v", group, err)
		}
		if err := os.Lchown(r.GetTargetPath(), -1, gid); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts and removes the target path; an inline
// volume's directory is removed with it.
func (s *Server) NodeUnpublishVolume(_ context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter("NodeUnpublishVolume", r.GetVolumeId(), r.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := unmount(r.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := os.Remove(r.GetTargetPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	dir := s.volumeDir(r.GetVolumeId())
	marker := dir + ephemeralMarker
	if _, err := os.Stat(marker); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		_ = os.Remove(marker)
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// bindMount bind-mounts src on target unless target is a mount point
// already (idempotent, as CSI asks), read-only when ro.
func bindMount(src, target string, ro bool) error {
	mounted, err := IsMountPoint(target)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind mount %s on %s: %v", src, target, err)
	}
	if ro {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return nil
}

// unmount unmounts target when it is a mount point.
func unmount(target string) error {
	mounted, err := IsMountPoint(target)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if !mounted {
		return nil
	}
	if err := unix.Unmount(target, 0); err != nil {
		return status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	return nil
}

// MountPoints lists the mount points of /proc/self/mountinfo, unescaped.
func MountPoints() ([]string, error) { return fsutil.MountPaths() }

// IsMountPoint reports whether path is a mount point in this process's
// mount namespace (one of MountPoints).
func IsMountPoint(path string) (bool, error) {
	mps, err := MountPoints()
	if err != nil {
		return false, err
	}
	return slices.Contains(mps, path), nil
}
