package fsutil

import (
	"errors"
	"fmt"
	"os"
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
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
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

// MountPaths lists the mount points of /proc/self/mountinfo in mount
// order, octal escapes decoded.
func MountPaths() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			out = append(out, UnescapeMountPath(f[4]))
		}
	}
	return out, nil
}

// UnescapeMountPath decodes the octal escapes the kernel writes in the
// paths of /proc/PID/mountinfo (\040 for a space, \011, \012, \134).
func UnescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				out.WriteByte(v)
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
