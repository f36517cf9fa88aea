package volumemgr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// HostMounter is the Mounter of the host: mount(2) and umount(2) through
// golang.org/x/sys/unix, and the mount table from /proc/self/mountinfo. It
// needs CAP_SYS_ADMIN (root) to mount. The zero value is ready to use.
type HostMounter struct {
	// MountInfo is the mountinfo file to read; "" means
	// /proc/self/mountinfo.
	MountInfo string
}

var _ Mounter = HostMounter{}

// mountFlag returns the mount(2) flag of an option word; other options are
// passed on as file-system data.
func mountFlag(o string) (uintptr, bool) {
	switch o {
	case "bind":
		return unix.MS_BIND, true
	case "rbind":
		return unix.MS_BIND | unix.MS_REC, true
	case "ro":
		return unix.MS_RDONLY, true
	case "nosuid":
		return unix.MS_NOSUID, true
	case "nodev":
		return unix.MS_NODEV, true
	case "noexec":
		return unix.MS_NOEXEC, true
	case "remount":
		return unix.MS_REMOUNT, true
	}
	return 0, false
}

// Mount mounts source on target with mount(2). A read-only bind mount takes
// a second remount call, as mount(8) does.
func (HostMounter) Mount(ctx context.Context, source, target, fstype string, options []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var flags uintptr
	var data []string
	for _, o := range options {
		if f, ok := mountFlag(o); ok {
			flags |= f
			continue
		}
		data = append(data, o)
	}
	if fstype == "" && flags&unix.MS_BIND == 0 {
		return fmt.Errorf("mount %s on %s: no file-system type and not a bind mount", source, target)
	}
	if err := unix.Mount(source, target, fstype, flags, strings.Join(data, ",")); err != nil {
		return &os.PathError{Op: "mount " + source + " on", Path: target, Err: err}
	}
	if flags&unix.MS_BIND != 0 && flags&unix.MS_RDONLY != 0 && flags&unix.MS_REMOUNT == 0 {
		if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return &os.PathError{Op: "remount read-only", Path: target, Err: err}
		}
	}
	return nil
}

// Unmount unmounts target with umount(2).
func (HostMounter) Unmount(ctx context.Context, target string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := unix.Unmount(target, 0); err != nil {
		return &os.PathError{Op: "unmount", Path: target, Err: err}
	}
	return nil
}

// MountPoints parses the mountinfo file.
func (h HostMounter) MountPoints(ctx context.Context) ([]MountPoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := h.MountInfo
	if name == "" {
		name = "/proc/self/mountinfo"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return parseMountInfo(b)
}

// parseMountInfo parses proc(5) mountinfo lines (fsutil.ParseMountInfo):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
func parseMountInfo(b []byte) ([]MountPoint, error) {
	ms, err := fsutil.ParseMountInfo(string(b))
	if err != nil {
		return nil, err
	}
	out := make([]MountPoint, len(ms))
	for i, m := range ms {
		out[i] = MountPoint{Path: m.Point, Type: m.FSType, Source: m.Source}
	}
	return out, nil
}

// mountTable is a snapshot of the mount table with the questions the
// package asks of it.
type mountTable []MountPoint

func readMountTable(ctx context.Context, m Mounter) (mountTable, error) {
	mps, err := m.MountPoints(ctx)
	if err != nil {
		return nil, err
	}
	return mountTable(mps), nil
}

// at returns the topmost mount on path, if any.
func (t mountTable) at(path string) (MountPoint, bool) {
	path = filepath.Clean(path)
	for i := len(t) - 1; i >= 0; i-- {
		if filepath.Clean(t[i].Path) == path {
			return t[i], true
		}
	}
	return MountPoint{}, false
}

// below returns the mount points at or under dir.
func (t mountTable) below(dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	for _, mp := range t {
		p := filepath.Clean(mp.Path)
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// MakeRShared makes dir a mount point with recursive shared propagation,
// bind-mounting it on itself first if it is not a mount point, as the
// kubelet does with its root directory at start-up: volumes mounted with
// mountPropagation HostToContainer or Bidirectional need it. It does
// nothing when dir already is a shared mount point.
func (h HostMounter) MakeRShared(ctx context.Context, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name := h.MountInfo
	if name == "" {
		name = "/proc/self/mountinfo"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	dir = filepath.Clean(dir)
	isMount, shared := false, false
	for _, line := range strings.Split(string(b), "\n") {
		pre, _, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 6 || filepath.Clean(fsutil.UnescapeMountPath(f[4])) != dir {
			continue
		}
		isMount, shared = true, false // the last (topmost) entry wins
		for _, opt := range f[6:] {
			if strings.HasPrefix(opt, "shared:") {
				shared = true
			}
		}
	}
	if isMount && shared {
		return nil
	}
	if !isMount {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return &os.PathError{Op: "bind-mount on itself", Path: dir, Err: err}
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return &os.PathError{Op: "make rshared", Path: dir, Err: err}
	}
	return nil
}
