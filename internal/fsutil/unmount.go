package fsutil

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// UnmountBelow detaches (MNT_DETACH) every mount at dir or below it,
// deepest first, and returns the mount points it detached. A stopped
// agent leaves its root directory's bind mount and its pods' volumes
// mounted, as it should (a restarted agent adopts them); whoever removes
// such a directory for good (a test's cleanup, `make down`, the
// conformance harness) calls this first. Mount points are read from
// /proc/self/mountinfo, octal escapes decoded. Every mount is tried; the
// error joins the failures.
func UnmountBelow(dir string) ([]string, error) {
	return unmountFrom(dir, true)
}

// UnmountUnder is UnmountBelow for the mounts strictly under dir: a mount
// at dir itself (dir on a tmpfs of the caller's) stays.
func UnmountUnder(dir string) ([]string, error) {
	return unmountFrom(dir, false)
}

func unmountFrom(dir string, self bool) ([]string, error) {
	dir = filepath.Clean(dir)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	all, err := MountPaths()
	if err != nil {
		return nil, err
	}
	var below []string
	for _, mp := range all {
		if (self && mp == dir) || strings.HasPrefix(mp, dir+"/") {
			below = append(below, mp)
		}
	}
	// Deepest first; a point mounted twice is detached twice.
	sort.SliceStable(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
	var done []string
	var errs []error
	for _, mp := range below {
		err := unix.Unmount(mp, unix.MNT_DETACH)
		switch {
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT):
			continue // gone since the read (with its parent, or a second entry)
		case err != nil:
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
			continue
		}
		done = append(done, mp)
	}
	return done, errors.Join(errs...)
}
