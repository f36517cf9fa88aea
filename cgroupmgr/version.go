package cgroupmgr

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Version is the cgroup hierarchy layout a root holds.
type Version int

// Cgroup versions. VersionUnknown in a Config means "detect".
const (
	VersionUnknown Version = iota
	// V1: a tmpfs holding one mount per controller hierarchy (cpu,cpuacct,
	// memory, pids, ...), possibly beside a cgroup2 mount used by nobody
	// but systemd (the "hybrid" layout).
	V1
	// V2: the root itself is the unified cgroup2 hierarchy.
	V2
)

func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "unknown"
}

// DetectVersion tells the layout under root (normally /sys/fs/cgroup) from
// the type of the file system mounted there: cgroup2 is V2; a tmpfs (the
// v1 and hybrid layouts) is V1. Anything else is an error, never a guess.
func DetectVersion(root string) (Version, error) {
	magic, err := fsMagic(root)
	if err != nil {
		return VersionUnknown, fmt.Errorf("cgroupmgr: detect cgroup version: %w", err)
	}
	switch magic {
	case unix.CGROUP2_SUPER_MAGIC:
		return V2, nil
	case unix.TMPFS_MAGIC:
		return V1, nil
	}
	return VersionUnknown, fmt.Errorf("cgroupmgr: detect cgroup version: %s is neither a cgroup2 mount nor a tmpfs of v1 hierarchies (file system magic %#x); set Config.Version to use it anyway", root, magic)
}

// fsMagic is the type of the file system holding path.
func fsMagic(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return int64(st.Type), nil
}
