package csitest

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats reports a published (or staged) path: capacity,
// available bytes and inodes from statfs of the path, used bytes and inodes
// from a walk of the volume's tree (the driver's volumes share the state
// dir's filesystem, so statfs's used space would be the whole machine's).
// It reports no volume condition: CSI spec v1.13 has none (volume health is
// the separate NodeGetVolumeHealth RPC, which the driver does not serve).
func (s *Server) NodeGetVolumeStats(_ context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.GetVolumeId() == "" || r.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	if err := s.enter("NodeGetVolumeStats", r.GetVolumeId(), r.GetVolumePath()); err != nil {
		return nil, err
	}
	if resp, ok, err := s.blockStats(r.GetVolumeId(), r.GetVolumePath()); ok || err != nil {
		return resp, err
	}
	mounted, err := IsMountPoint(r.GetVolumePath())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !mounted {
		return nil, status.Errorf(codes.NotFound, "%s is not a mount point", r.GetVolumePath())
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.GetVolumePath(), &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", r.GetVolumePath(), err)
	}
	bytes, inodes, err := usage(r.GetVolumePath())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "measuring %s: %v", r.GetVolumePath(), err)
	}
	bsize := int64(st.Bsize) //nolint:unconvert // int32 on some platforms
	resp := &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bsize, Available: int64(st.Bavail) * bsize, Used: bytes},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: inodes},
	}}
	return resp, nil
}

// usage walks the tree at path (within its filesystem): bytes allocated
// and inodes, each hard-linked inode once.
func usage(path string) (bytes, inodes int64, err error) {
	var root syscall.Stat_t
	if err := syscall.Lstat(path, &root); err != nil {
		return 0, 0, err
	}
	seen := map[uint64]bool{}
	err = filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st.Dev != root.Dev {
			return fs.SkipDir
		}
		if !seen[st.Ino] {
			seen[st.Ino] = true
			inodes++
			bytes += st.Blocks * 512
		}
		return nil
	})
	return bytes, inodes, err
}

// blockStats reports a published block volume (the path is a block device):
// its size in bytes as the total, the only figure a block device has, as
// block drivers report it. ok is false for any other path.
func (s *Server) blockStats(handle, path string) (_ *csipb.NodeGetVolumeStatsResponse, ok bool, _ error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return nil, false, nil
	}
	var fst syscall.Stat_t
	if err := syscall.Stat(s.blockFile(handle), &fst); err != nil {
		return nil, true, status.Errorf(codes.NotFound, "block volume %s: %v", handle, err)
	}
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: fst.Size}}}, true, nil
}
