package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SubPath safety, as upstream (CVE-2017-1002101): a container that can
// write to a volume could replace a directory with a symlink to anywhere on
// the host just before the runtime bind-mounts VOLUME/SUBPATH. So the
// manager does not hand the runtime that path. It resolves the subPath
// (symlinks inside the volume are allowed: configMap keys are symlinks),
// refuses a result outside the volume, then opens it one element at a time
// with openat(O_NOFOLLOW) from the volume root — refusing any symlink met
// on the way, which closes the race — and bind-mounts the opened file
// descriptor (/proc/PID/fd/N) on PODDIR/volume-subpaths/VOLUME/CONTAINER/
// INDEX. The runtime mounts that bind mount, which cannot be redirected.
// Missing subPath directories are created the same way (mkdirat from an
// opened parent). The bind mounts go when the volume is torn down.

// subPathsDir holds the subPath bind mounts in a pod directory.
const subPathsDir = "volume-subpaths"

// within reports whether p is base or below it (both clean and absolute).
func within(p, base string) bool {
	return p == base || strings.HasPrefix(p, strings.TrimSuffix(base, "/")+"/")
}

// openNoFollow opens path, which must be base or below it and contain no
// symlink, one element at a time from base, and returns an O_PATH file
// descriptor. A symlink on the way is an error, even one pointing inside.
func openNoFollow(path, base string) (int, error) {
	rel, err := filepath.Rel(base, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return -1, fmt.Errorf("path %s is outside of allowed base %s", path, base)
	}
	fd, err := unix.Open(base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: base, Err: err}
	}
	if rel == "." {
		return fd, nil
	}
	cur := base
	for _, seg := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, seg)
		child, err := unix.Openat(fd, seg, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: cur, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(child, &st); err != nil {
			_ = unix.Close(child)
			return -1, &os.PathError{Op: "fstat", Path: cur, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			_ = unix.Close(child)
			return -1, fmt.Errorf("unexpected symlink found %s", cur)
		}
		fd = child
	}
	return fd, nil
}

// safeMakeDir creates base/sub and its missing parents without following a
// symlink out of base: the part that exists must resolve inside base, and
// each new directory is made with mkdirat from the one opened before it.
// perm is applied exactly (with setgid, setuid and sticky bits).
func safeMakeDir(base, sub string, perm os.FileMode) error {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return fmt.Errorf("error resolving symlinks in %s: %w", base, err)
	}
	full := filepath.Join(realBase, sub)
	if !within(full, realBase) {
		return fmt.Errorf("path %s is outside of allowed base %s", full, realBase)
	}
	if st, err := os.Stat(full); err == nil {
		if st.IsDir() {
			return nil
		}
		return &os.PathError{Op: "mkdir", Path: full, Err: unix.ENOTDIR}
	}
	// The longest prefix that exists (following symlinks, checked below).
	existing, rest := realBase, []string{}
	segs := strings.Split(filepath.Clean(sub), "/")
	for i, seg := range segs {
		next := filepath.Join(existing, seg)
		if _, err := os.Stat(next); errors.Is(err, fs.ErrNotExist) {
			rest = segs[i:]
			break
		} else if err != nil {
			return err
		}
		existing = next
	}
	realExisting, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return err
	}
	if !within(realExisting, realBase) {
		return fmt.Errorf("path %s is outside of allowed base %s", realExisting, realBase)
	}
	fd, err := openNoFollow(realExisting, realBase)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	mode := uint32(perm & os.ModePerm)
	if perm&os.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if perm&os.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if perm&os.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	cur := realExisting
	for _, seg := range rest {
		cur = filepath.Join(cur, seg)
		if err := unix.Mkdirat(fd, seg, mode); err != nil {
			return &os.PathError{Op: "mkdir", Path: cur, Err: err}
		}
		child, err := unix.Openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: cur, Err: err}
		}
		_ = unix.Close(fd)
		fd = child
		// mkdirat's mode went through the umask.
		if err := unix.Fchmod(fd, mode); err != nil {
			return &os.PathError{Op: "chmod", Path: cur, Err: err}
		}
	}
	return nil
}

// subPathTarget is where the bind mount of a container's volumeMount goes.
func subPathTarget(podDir, volume, container string, index int) string {
	return filepath.Join(podDir, subPathsDir, volume, container, strconv.Itoa(index))
}

// bindSubPath resolves volPath/sub safely and bind-mounts it on target,
// returning target. An existing bind mount of the same file is reused; a
// stale one is replaced.
func bindSubPath(ctx context.Context, m Mounter, volPath, sub, target string) (string, error) {
	realVol, err := filepath.EvalSymlinks(volPath)
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", volPath, err)
	}
	realPath, err := filepath.EvalSymlinks(filepath.Join(volPath, sub))
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", filepath.Join(volPath, sub), err)
	}
	if !within(realPath, realVol) {
		return "", fmt.Errorf("subpath %q not within volume path %q", realPath, realVol)
	}
	fd, err := openNoFollow(realPath, realVol)
	if err != nil {
		return "", fmt.Errorf("error opening subpath %v: %w", realPath, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var src unix.Stat_t
	if err := unix.Fstat(fd, &src); err != nil {
		return "", err
	}

	mt, err := readMountTable(ctx, m)
	if err != nil {
		return "", err
	}
	if _, ok := mt.at(target); ok {
		var dst unix.Stat_t
		if err := unix.Stat(target, &dst); err == nil && dst.Dev == src.Dev && dst.Ino == src.Ino {
			return target, nil
		}
		if err := m.Unmount(ctx, target); err != nil {
			return "", fmt.Errorf("unmount stale subpath %s: %w", target, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	if src.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	} else if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
		if err := os.WriteFile(target, nil, 0o640); err != nil {
			return "", err
		}
	}
	source := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	if err := m.Mount(ctx, source, target, "", []string{"bind"}); err != nil {
		_ = os.Remove(target)
		return "", fmt.Errorf("error mounting %s: %w", realPath, err)
	}
	return target, nil
}

// cleanSubPaths unmounts and removes the subPath bind mounts of one volume.
func cleanSubPaths(ctx context.Context, m Mounter, podDir, volume string) error {
	if err := cleanMountsIn(ctx, m, filepath.Join(podDir, subPathsDir, volume)); err != nil {
		return err
	}
	return removeEmpty(filepath.Join(podDir, subPathsDir))
}

// cleanAllSubPaths unmounts and removes every subPath bind mount of a pod.
func cleanAllSubPaths(ctx context.Context, m Mounter, podDir string) error {
	return cleanMountsIn(ctx, m, filepath.Join(podDir, subPathsDir))
}

// cleanMountsIn unmounts everything mounted below dir (deepest first), then
// removes dir.
func cleanMountsIn(ctx context.Context, m Mounter, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	mt, err := readMountTable(ctx, m)
	if err != nil {
		return err
	}
	below := mt.below(dir)
	sort.SliceStable(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
	for _, p := range below {
		if err := m.Unmount(ctx, p); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return removeUnmounted(ctx, m, dir)
}
