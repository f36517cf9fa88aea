package csitest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A raw block volume is the file STATE/volumes/HANDLE.img, attached to a
// loop device (losetup) by NodeStageVolume, or by NodePublishVolume when
// it was not staged; the device's path is kept in STATE/volumes/HANDLE.loop.
// NodePublishVolume bind-mounts the device node on the target file;
// NodeUnstageVolume detaches the loop device and keeps the file, so the
// data outlives the pods.

func (s *Server) blockFile(handle string) string { return s.volumeDir(handle) + ".img" }
func (s *Server) loopFile(handle string) string  { return s.volumeDir(handle) + ".loop" }

// attachBlock creates the volume's file if missing and returns its loop
// device, attaching one unless the recorded one still backs the file.
func (s *Server) attachBlock(handle string) (string, error) {
	file := s.blockFile(handle)
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		size := s.cfg.BlockSize
		if size == 0 {
			size = DefaultBlockSize
		}
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
		if err := os.Truncate(file, size); err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
	}
	if b, err := os.ReadFile(s.loopFile(handle)); err == nil {
		dev := strings.TrimSpace(string(b))
		if out, err := exec.Command("losetup", "-j", file).Output(); err == nil && strings.HasPrefix(string(out), dev+":") {
			return dev, nil
		}
	}
	out, err := exec.Command("losetup", "-f", "--show", file).CombinedOutput()
	if err != nil {
		return "", status.Errorf(codes.Internal, "losetup -f --show %s: %v: %s", file, err, out)
	}
	dev := strings.TrimSpace(string(out))
	if err := os.WriteFile(s.loopFile(handle), []byte(dev+"\n"), 0o600); err != nil {
		return "", status.Error(codes.Internal, err.Error())
	}
	return dev, nil
}

// detachBlock detaches the volume's loop device, if it has one.
func (s *Server) detachBlock(handle string) error {
	b, err := os.ReadFile(s.loopFile(handle))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	dev := strings.TrimSpace(string(b))
	if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
		return status.Errorf(codes.Internal, "losetup -d %s: %v: %s", dev, err, out)
	}
	if err := os.Remove(s.loopFile(handle)); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// publishBlock bind-mounts the volume's loop device on target, a file it
// creates (the node creates only its directory, as CSI says).
func (s *Server) publishBlock(handle, target string, ro bool) error {
	dev, err := s.attachBlock(handle)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	_ = f.Close()
	return bindMount(dev, target, ro)
}

// NodeExpandVolume logs the call to ExpandLogFile and, for a block volume,
// grows its file to the required bytes and refreshes the loop device's
// size (losetup -c); a file-system volume (a directory) has nothing to
// grow. It reports the required bytes as the capacity.
func (s *Server) NodeExpandVolume(_ context.Context, r *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.GetVolumeId() == "" || r.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	if err := s.enter("NodeExpandVolume", r.GetVolumeId(), r.GetVolumePath()); err != nil {
		return nil, err
	}
	want := r.GetCapacityRange().GetRequiredBytes()
	if err := s.appendLine(ExpandLogFile, fmt.Sprintf("%s %s %d", r.GetVolumeId(), r.GetVolumePath(), want)); err != nil {
		return nil, err
	}
	if r.GetVolumeCapability().GetBlock() != nil {
		if err := s.growBlock(r.GetVolumeId(), want); err != nil {
			return nil, err
		}
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: want}, nil
}

func (s *Server) growBlock(handle string, size int64) error {
	file := s.blockFile(handle)
	st, err := os.Stat(file)
	if err != nil {
		return status.Errorf(codes.NotFound, "block volume %s: %v", handle, err)
	}
	if st.Size() < size {
		if err := os.Truncate(file, size); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	if b, err := os.ReadFile(s.loopFile(handle)); err == nil {
		dev := strings.TrimSpace(string(b))
		if out, err := exec.Command("losetup", "-c", dev).CombinedOutput(); err != nil {
			return status.Errorf(codes.Internal, "losetup -c %s: %v: %s", dev, err, out)
		}
	}
	return nil
}

// appendLine appends line to the state file name.
func (s *Server) appendLine(name, line string) error {
	f, err := os.OpenFile(filepath.Join(s.cfg.StateDir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	_, werr := fmt.Fprintln(f, line)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return status.Error(codes.Internal, werr.Error())
	}
	return nil
}

// LoopBackingFiles lists the backing files of the host's loop devices
// (/sys/block/loop*/loop/backing_file), for tests that check a volume's
// loop device is there or gone.
func LoopBackingFiles() ([]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			out = append(out, strings.TrimSpace(string(b)))
		}
	}
	return out, nil
}
