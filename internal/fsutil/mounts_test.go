package fsutil

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMountInfo(t *testing.T) {
	text := strings.Join([]string{
		`22 27 0:21 / /proc rw,relatime - proc proc rw`,
		// Optional fields before the separator, escaped paths.
		`35 24 8:1 /sub\040dir /mnt/a\040b rw,nosuid shared:1 master:2 - ext4 /dev/disk\040x rw,errors=remount-ro`,
		// A cgroup v1 hierarchy: controllers in the super options.
		`40 30 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev - cgroup cgroup rw,cpu,cpuacct`,
		// An empty source leaves two spaces in a row.
		`41 22 0:50 / /run/x rw - tmpfs  rw,size=1024k`,
		``,
	}, "\n")
	got, err := ParseMountInfo(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Point: "/proc", Root: "/", Options: "rw,relatime", FSType: "proc", Source: "proc", SuperOptions: "rw"},
		{Point: "/mnt/a b", Root: "/sub dir", Options: "rw,nosuid", FSType: "ext4", Source: "/dev/disk x", SuperOptions: "rw,errors=remount-ro"},
		{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Options: "rw,nosuid,nodev", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,cpu,cpuacct"},
		{Point: "/run/x", Root: "/", Options: "rw", FSType: "tmpfs", Source: "", SuperOptions: "rw,size=1024k"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMountInfo =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseMountInfoRefusesOtherShapes(t *testing.T) {
	for _, line := range []string{
		`22 27 0:21 / /proc rw,relatime proc proc rw`, // no separator
		`22 27 0:21 / /proc - proc proc rw`,           // no mount options
		`22 27 0:21 / /proc rw - proc rw`,             // no source
	} {
		_, err := ParseMountInfo("1 0 0:1 / / rw - rootfs rootfs rw\n" + line + "\n")
		if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), line) {
			t.Errorf("ParseMountInfo(%q): err = %v, want one naming line 2", line, err)
		}
	}
}

// TestMounts reads this process's own table: it has a root mount, and
// MountPaths lists the same points in the same order.
func TestMounts(t *testing.T) {
	ms, err := Mounts()
	if err != nil {
		t.Fatal(err)
	}
	paths, err := MountPaths()
	if err != nil {
		t.Fatal(err)
	}
	root := false
	for i, m := range ms {
		root = root || m.Point == "/"
		if m.FSType == "" || m.Options == "" || m.SuperOptions == "" {
			t.Errorf("mount %d has empty fields: %+v", i, m)
		}
		if i >= len(paths) || paths[i] != m.Point {
			t.Fatalf("MountPaths = %v, does not match Mounts at %d (%s)", paths, i, m.Point)
		}
	}
	if !root || len(paths) != len(ms) {
		t.Errorf("Mounts lists %d mounts (root among them: %v), MountPaths %d", len(ms), root, len(paths))
	}
}
