package fsutil

import (
	"fmt"
	"os"
	"strings"
)

// mountInfo is the mount table of the calling process.
const mountInfo = "/proc/self/mountinfo"

// Mount is one entry of /proc/self/mountinfo (proc(5)), its paths with
// the kernel's octal escapes decoded.
type Mount struct {
	Point        string // where it is mounted
	Root         string // the directory of its file system mounted there ("/" for the whole)
	Options      string // per-mount options: "rw,nosuid,relatime"
	FSType       string // "tmpfs", "cgroup2", "ext4"
	Source       string // "tmpfs", "/dev/sda1", or "" when the kernel has none
	SuperOptions string // the file system's options: "rw,size=1024k", a cgroup's controllers
}

// Mounts lists the calling process's mounts in mount order (parents
// before the mounts on top of them).
func Mounts() ([]Mount, error) {
	b, err := os.ReadFile(mountInfo)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	ms, err := ParseMountInfo(string(b))
	if err != nil {
		return nil, fmt.Errorf("read mount table %s: %w", mountInfo, err)
	}
	return ms, nil
}

// MountPaths lists the mount points of /proc/self/mountinfo in mount
// order, octal escapes decoded.
func MountPaths() ([]string, error) {
	ms, err := Mounts()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Point
	}
	return out, nil
}

// ParseMountInfo parses mountinfo lines: "ID PARENT MAJ:MIN ROOT POINT
// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS". Fields are
// separated by one space and never contain one (the kernel escapes it), so
// an empty source shows as two spaces in a row. A line of another shape
// is an error naming it.
func ParseMountInfo(text string) ([]Mount, error) {
	var out []Mount
	for n, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		g := strings.Split(post, " ")
		if !ok || len(f) < 6 || len(g) < 3 {
			return nil, fmt.Errorf("line %d is not a mountinfo entry: %q", n+1, line)
		}
		out = append(out, Mount{
			Point: UnescapeMountPath(f[4]), Root: UnescapeMountPath(f[3]), Options: f[5],
			FSType: g[0], Source: UnescapeMountPath(g[1]), SuperOptions: g[2],
		})
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
